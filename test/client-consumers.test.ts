// The client's consumers: the calls, watch() resuming from and committing to the server-kept
// position across restarts of the worker (no gap, no duplicate), a position compacted away
// (a reset, then a snapshot), and a StateMirror resuming from its consumer and checkpoint.
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { StateMirror, StatelogClient, type LogRecord, type ResetEvent, type WatchEvent } from '@statelog/client';
import { startApp, tempDir, type TestApp } from './support/helpers.js';

let t: TestApp;
let client: StatelogClient;
let url: string;
let dir: string;
beforeEach(async () => {
  dir = tempDir();
  // No tombstone retention: a compaction run removes every delete marker nobody holds.
  t = await startApp({ STATELOG_TOMBSTONE_RETENTION_MS: '0' }, { dir });
  url = `http://127.0.0.1:${(t.app.server.address() as { port: number }).port}`;
  client = new StatelogClient({ url, retry: { baseDelayMs: 5 } });
});
afterEach(async () => {
  await client.close();
  await t.close();
});

/** A worker: runs a watch in the background, keeping what it is given, until stopped. */
function worker(options: Parameters<StatelogClient['watch']>[0]) {
  const stop = new AbortController();
  const events: WatchEvent[] = [];
  const running = (async () => {
    for await (const event of client.watch({ ...options, signal: stop.signal })) events.push(event);
  })();
  return {
    events,
    records: () => events.flatMap((e) => (e.type === 'record' ? [`${e.record.op} ${e.record.key} ${e.record.offset}${e.snapshot ? ' snapshot' : ''}`] : [])),
    changes: () => events.flatMap((e) => (e.type === 'record' && !e.snapshot ? [e.record.offset] : [])),
    async stop() {
      stop.abort();
      await running;
    },
  };
}

async function until(check: () => boolean | Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('not reached in time');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

const positionOf = async (name: string) => (await client.consumer(name))?.offset ?? null;
const head = async () => (await client.stats()).head;
const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);

describe('consumers in the client', () => {
  it('commits, reads, lists and deletes', async () => {
    await client.put('a', 1);
    await client.put('b', 2);
    expect(await client.consumer('w')).toBeNull();
    expect(await client.commitConsumer('w', 1, { hold: true })).toMatchObject({ name: 'w', offset: 1, lag: 1, hold: true });
    await expect(client.commitConsumer('w', 0)).rejects.toMatchObject({ status: 409, code: 'conflict', details: { currentOffset: 1 } });
    await expect(client.commitConsumer('w', 2, { ifMatch: 0 })).rejects.toMatchObject({ code: 'precondition_failed' });
    expect(await client.commitConsumer('w', 0, { rewind: true, ifMatch: 1 })).toMatchObject({ offset: 0, hold: true });
    expect((await client.consumers()).consumers.map((c) => c.name)).toEqual(['w']);
    expect(await client.deleteConsumer('w')).toBe(true);
    expect(await client.deleteConsumer('w')).toBe(false);
  });

  it('watch() with a consumer resumes after the committed offset when the worker starts again', async () => {
    for (let i = 0; i < 3; i++) await client.put(`k${i}`, i);
    // No consumer yet: a snapshot, whose offset is committed once the worker has taken it.
    const first = worker({ consumer: 'indexer' });
    await until(async () => (await positionOf('indexer')) === 3);
    await first.stop();
    expect(first.records()).toEqual(['set k0 1 snapshot', 'set k1 2 snapshot', 'set k2 3 snapshot']);

    await client.put('k3', 3);
    await client.delete('k0');
    // Started again: only the changes after the committed offset, which it commits in turn.
    const second = worker({ consumer: 'indexer' });
    await until(async () => (await positionOf('indexer')) === 5);
    await second.stop();
    expect(second.events[0]).toMatchObject({ type: 'initialized', offset: 3 });
    expect(second.records()).toEqual(['set k3 4', 'delete k0 5']);
    expect(await client.consumer('indexer')).toMatchObject({ offset: 5, lag: 0 });
  });

  it('a worker stopped mid-stream under writes and started again gets every change once, in order', async () => {
    for (let i = 0; i < 3; i++) await client.put(`k${i}`, i);
    let writing = true;
    const writer = (async () => {
      for (let i = 0; writing || i < 40; i++) {
        await client.put(`k${i % 7}`, i);
        await new Promise((resolve) => setTimeout(resolve, 2));
      }
    })();
    const first = worker({ consumer: 'mid' });
    await until(() => first.changes().length >= 15);
    // Stopped while changes keep coming and its last ones are not yet committed (within a second).
    await first.stop();
    const second = worker({ consumer: 'mid' });
    await until(() => second.changes().length >= 15);
    writing = false;
    await writer;
    const last = await head();
    await until(() => second.changes().at(-1) === last);
    await second.stop();

    const snapshotAt = (first.events.find((e) => e.type === 'initialized') as { offset: number }).offset;
    expect([...first.changes(), ...second.changes()]).toEqual(range(snapshotAt + 1, last));
    expect(second.events[0]).toEqual({ type: 'initialized', offset: first.changes().at(-1), epoch: expect.any(String) });
    expect(await positionOf('mid')).toBe(last);
  });

  it('a loop left with break commits what it handled before: the change it broke on comes again', async () => {
    await client.put('a', 1);
    await client.commitConsumer('b', 1);
    await client.put('b', 2); // 2
    await client.put('c', 3); // 3
    for await (const event of client.watch({ consumer: 'b' })) {
      if (event.type === 'record' && event.record.offset === 3) break;
    }
    expect(await positionOf('b')).toBe(2);
    const again = worker({ consumer: 'b' });
    await until(() => again.changes().length > 0);
    await again.stop();
    expect(again.changes()).toEqual([3]);
  });

  it('a position compacted away while the worker was stopped: a reset, a snapshot past the horizon, committed', async () => {
    for (const key of ['a', 'b', 'c', 'd']) await client.put(key, 1);
    await client.commitConsumer('late', 4); // no hold: compaction may remove what it has not read
    await client.delete('a'); // 5
    await client.delete('b'); // 6
    await client.put('e', 1); // 7
    expect((await client.compact()).horizon).toBe(6);

    const resumed = worker({ consumer: 'late' });
    await until(async () => (await positionOf('late')) === 7);
    await client.put('f', 1); // 8
    await until(() => resumed.changes().includes(8));
    await resumed.stop();
    expect(await positionOf('late')).toBe(8);
    const types = resumed.events.map((e) => (e.type === 'reset' ? `reset ${e.reason}` : e.type));
    expect(types.slice(0, 2)).toEqual(['reset offset_compacted', 'record']);
    expect(resumed.records()).toEqual(['set c 3 snapshot', 'set d 4 snapshot', 'set e 7 snapshot', 'set f 8']);
    expect(resumed.events.find((e) => e.type === 'initialized')).toMatchObject({ offset: 7 });
  });
});

describe('a StateMirror with a consumer', () => {
  const mirrors: StateMirror[] = [];
  afterEach(async () => {
    for (const mirror of mirrors.splice(0)) await mirror.close();
  });

  function mirrorOf(options: Partial<ConstructorParameters<typeof StateMirror>[0]> = {}) {
    const mirror = new StateMirror({ url, prefix: 'inv/', retry: { baseDelayMs: 10, maxDelayMs: 100 }, warn: () => {}, ...options });
    mirrors.push(mirror);
    const changes: number[] = [];
    const resets: ResetEvent[] = [];
    mirror.on('change', (record: LogRecord) => changes.push(record.offset));
    mirror.on('reset', (event: ResetEvent) => resets.push(event));
    return { mirror, changes, resets };
  }

  async function closed(mirror: StateMirror): Promise<void> {
    await mirror.close();
    mirrors.splice(mirrors.indexOf(mirror), 1);
  }

  it('commits the offsets it has applied, with a hold, and its last one when closed', async () => {
    await client.put('inv/a', 1);
    const { mirror } = mirrorOf({ consumer: { name: 'mirror-1', hold: true } });
    await mirror.ready;
    await client.put('inv/b', 2);
    await client.put('inv/c', 3);
    await until(() => mirror.offset === 3);
    await closed(mirror);
    expect(await client.consumer('mirror-1')).toMatchObject({ offset: 3, hold: true, lag: 0 });
  });

  it('without a checkpoint, a restart takes a snapshot no older than the consumer and goes on from it', async () => {
    await client.put('inv/a', 1);
    const first = mirrorOf({ consumer: 'm' });
    await first.mirror.ready;
    await client.put('inv/b', 2);
    await until(() => first.mirror.offset === 2);
    await closed(first.mirror);
    expect(await positionOf('m')).toBe(2);

    await client.put('inv/c', 3);
    const second = mirrorOf({ consumer: 'm' });
    await second.mirror.ready;
    expect(second.mirror.offset).toBeGreaterThanOrEqual(2);
    expect(second.mirror.snapshots).toBe(1);
    await client.put('inv/d', 4);
    await until(() => second.changes.includes(4));
    expect(Object.fromEntries(second.mirror.entries())).toEqual({ 'inv/a': 1, 'inv/b': 2, 'inv/c': 3, 'inv/d': 4 });
    await closed(second.mirror);
    expect(await positionOf('m')).toBe(4);
  });

  it('with a checkpoint behind its consumer, applies the changes up to the consumer without a change event', async () => {
    const checkpoint = join(dir, 'mirror.checkpoint');
    await client.put('inv/a', 1);
    const first = mirrorOf({ consumer: 'm', checkpoint });
    await first.mirror.ready;
    await closed(first.mirror); // the file and the consumer at 1

    for (let i = 2; i <= 6; i++) await client.put(`inv/k${i}`, i);
    // As after a crash between a commit (within a second) and the file's save (every 5 s):
    // the group has handled up to 4, the file holds the state at 1.
    await client.commitConsumer('m', 4);
    const second = mirrorOf({ consumer: 'm', checkpoint });
    await second.mirror.ready;
    await until(() => second.mirror.offset === 6);
    expect(second.mirror.snapshots).toBe(0);
    expect(second.changes).toEqual([5, 6]);
    expect(second.mirror.get('inv/k3')).toBe(3);
    await closed(second.mirror);
    expect(await positionOf('m')).toBe(6);
  });

  it('with a checkpoint ahead of its consumer, resumes after the checkpoint and commits it', async () => {
    const checkpoint = join(dir, 'mirror.checkpoint');
    for (let i = 1; i <= 3; i++) await client.put(`inv/k${i}`, i);
    const first = mirrorOf({ checkpoint });
    await first.mirror.ready;
    await closed(first.mirror); // the file at 3
    await client.commitConsumer('m', 1);
    await client.put('inv/k4', 4);

    const second = mirrorOf({ consumer: 'm', checkpoint });
    await second.mirror.ready;
    await until(() => second.mirror.offset === 4);
    expect(second.mirror.snapshots).toBe(0);
    expect(second.changes).toEqual([4]);
    await closed(second.mirror);
    expect(await positionOf('m')).toBe(4);
  });

  it('a checkpoint compacted away: a reset, a new snapshot, and the consumer moved to it', async () => {
    const checkpoint = join(dir, 'mirror.checkpoint');
    for (let i = 1; i <= 4; i++) await client.put(`inv/k${i}`, i);
    const first = mirrorOf({ consumer: 'm', checkpoint });
    await first.mirror.ready;
    await closed(first.mirror); // the file and the consumer at 4
    await client.delete('inv/k1'); // 5
    await client.delete('inv/k2'); // 6
    await client.put('inv/k3', 'new'); // 7
    expect((await client.compact()).horizon).toBe(6);

    const second = mirrorOf({ consumer: 'm', checkpoint });
    await second.mirror.ready;
    expect(second.resets).toEqual([{ reason: 'offset_compacted' }]);
    expect(Object.fromEntries(second.mirror.entries())).toEqual({ 'inv/k3': 'new', 'inv/k4': 4 });
    await until(async () => (await positionOf('m')) === 7);
  });
});
