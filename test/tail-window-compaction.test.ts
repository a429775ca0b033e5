// What a reader of the tail window may see once compaction has removed records it holds: only
// records superseded by a later record of their key (which the reader reads too), never a
// removed delete marker (a reader at or past the horizon is after it), so a snapshot at N plus
// the records after N, from the window or the store, still equals the state (docs/reads.md).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApp, type TestApp } from './support/helpers.js';
import { applyRecords, baseUrl, plain, readAllChanges, readSnapshot, stateOf, writeBatch } from './support/stream-clients.js';

let t: TestApp;
let base: string;
beforeAll(async () => {
  t = await startApp({ STATELOG_SYNC: 'normal' });
  base = baseUrl(t.app);
});
afterAll(() => t.close());

async function storeReads(): Promise<number> {
  const text = await (await fetch(`${base}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith('statelog_feed_reads_total{from="store"} '));
  return line ? Number(line.split(' ').at(-1)) : 0;
}

const historyOffsets = async (key: string): Promise<number[]> => {
  const res = await fetch(`${base}/v1/keys/${encodeURIComponent(key)}/history?limit=1000`);
  expect(res.status).toBe(200);
  return ((await res.json()) as { records: { offset: number }[] }).records.map((record) => record.offset);
};

describe('the tail window after compaction', () => {
  it('gives a snapshot at N plus the records after N that equal the state, superseded records included', async () => {
    await writeBatch(base, [{ key: 'gone', value: 0 }, { key: 'kept', value: 0 }]);
    await writeBatch(base, [{ key: 'gone', op: 'delete' }]);
    const snapshot = await readSnapshot(base);
    // The window starts at the head of its first read: from here on it holds every record.
    await readAllChanges(base, snapshot.offset);
    for (let i = 0; i < 30; i++) {
      await writeBatch(base, [
        { key: `k/${i % 3}`, value: i },
        { key: `d/${i % 4}`, value: i },
        ...(i % 5 === 4 ? [{ key: `d/${i % 4}`, op: 'delete' }] : []),
      ]);
    }
    const read = await readAllChanges(base, snapshot.offset);

    const compact = await fetch(`${base}/v1/admin/compact`, { method: 'POST' });
    expect(compact.status).toBe(200);
    const { removed, horizon } = (await compact.json()) as { removed: number; horizon: number };
    expect(removed).toBeGreaterThan(0);
    // Delete markers are kept (the retention): a removed one would raise the horizon past N, and a
    // reader at N would get 410 from the window as from the store (tail-window.test.ts).
    expect(horizon).toBe(0);

    // A commit since: the pages kept at the head are gone, the window answers, not the store.
    await writeBatch(base, [{ key: 'later', value: 1 }]);
    const storeBefore = await storeReads();
    const again = await readAllChanges(base, snapshot.offset);
    expect(await storeReads()).toBe(storeBefore);

    const kept = new Set((await Promise.all(['k/0', 'k/1', 'k/2', 'd/0', 'd/1', 'd/2', 'd/3', 'later'].map(historyOffsets))).flat());
    const removedShown = again.filter((record) => !kept.has(record.offset));
    // The window served records the store no longer has: each is superseded by a later record of its key.
    expect(removedShown.length).toBeGreaterThan(0);
    for (const record of removedShown) expect(again.some((later) => later.key === record.key && later.offset > record.offset)).toBe(true);
    expect(again.map((record) => record.offset)).toEqual([...read.map((record) => record.offset), again.at(-1)!.offset]);

    const state = await readSnapshot(base);
    expect(plain(applyRecords(stateOf(snapshot.entries), again))).toEqual(plain(stateOf(state.entries)));
    // A reader of the store alone (what the store gives after N) reaches the same state.
    const kepts = again.filter((record) => kept.has(record.offset));
    expect(plain(applyRecords(stateOf(snapshot.entries), kepts))).toEqual(plain(stateOf(state.entries)));
  });
});
