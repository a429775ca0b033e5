// Feed reads take turns with the rest of the event loop: queued reads run a slice at a
// time, other callbacks run between slices, and a reader gone by its turn is not read for.
import { describe, expect, it } from 'vitest';
import { ReaderGone, ReadTurns } from '../src/feed/read-turns.js';
import { toApiError } from '../src/http/error-handler.js';

/** Holds the event loop for `ms`, as a synchronous SQLite read does. */
function busy(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until);
}

describe('ReadTurns', () => {
  it('lets other callbacks run between slices of queued reads', async () => {
    const turns = new ReadTurns();
    let done = 0;
    const reads = Array.from({ length: 100 }, () =>
      turns.run(async () => {
        busy(1);
        done += 1;
      }),
    );
    // A request that arrives while the reads are queued: it runs after one slice, not after all.
    const doneWhenOtherRan = await new Promise<number>((resolve) => setImmediate(() => setImmediate(() => resolve(done))));
    await Promise.all(reads);
    expect(done).toBe(100);
    expect(doneWhenOtherRan).toBeGreaterThan(0);
    expect(doneWhenOtherRan).toBeLessThan(20);
  });

  it('drops a reader gone by its turn without reading, and keeps going after a read that throws', async () => {
    const turns = new ReadTurns();
    let reads = 0;
    const gone = turns.run(async () => (reads += 1), () => true);
    const throwing = turns.run((): Promise<number> => {
      throw new Error('read failed');
    });
    const kept = turns.run(async () => (reads += 1));
    const refused = await gone.then(() => null, (err: Error) => err);
    expect(refused).toBeInstanceOf(ReaderGone);
    expect(toApiError(refused!).statusCode).toBe(503);
    await expect(throwing).rejects.toThrow('read failed');
    expect(await kept).toBe(1);
    expect([reads, turns.waiting]).toEqual([1, 0]);
  });

  it('starts a bounded number of reads a slice, however cheap: their answers run after it, outside its clock', async () => {
    const turns = new ReadTurns();
    let started = 0;
    const reads = Array.from({ length: 200 }, () => turns.run(async () => (started += 1)));
    const startedWhenOtherRan = await new Promise<number>((resolve) => setImmediate(() => setImmediate(() => resolve(started))));
    await Promise.all(reads);
    expect(started).toBe(200);
    expect(startedWhenOtherRan).toBeGreaterThan(0);
    expect(startedWhenOtherRan).toBeLessThanOrEqual(32);
  });
});
