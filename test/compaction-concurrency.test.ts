// Writes, snapshots and change readers while a large compaction runs in the same
// process, through the real app: every write is acknowledged and kept, every snapshot is
// the state at its offset, and every reader that follows the rules (re-snapshot below
// the horizon) ends at the current state.
import { afterAll, describe, expect, it } from 'vitest';
import type { LogStore, StoredRecord } from '../src/store/log-store.js';
import { keyName } from '../harness/fill-log.js';
import { json, startApp, TEST_STORE, type TestApp } from './support/helpers.js';
import { allRecords, applyRecords, currentState, keptCounters, snapshotPage } from './support/store-helpers.js';

// PostgreSQL compacts about ten times slower than SQLite: half the log there still makes
// a run of seconds, with hundreds of writes, snapshots and reads during it.
const FILLED = TEST_STORE === 'postgres' ? 100_000 : 200_000;
const KEYS = 1_000;
/** Keys key-000000 .. key-000049 end deleted; the writers leave the first 25 of them alone. */
const DELETED = 50;
const UNTOUCHED = 25;

let t: TestApp;
afterAll(async () => {
  await t?.close();
});

const turn = () => new Promise((resolve) => setImmediate(resolve));

/** A snapshot read a page at a time, letting the event loop run between pages. */
async function slowSnapshot(store: LogStore): Promise<{ offset: number; state: Map<string, string> }> {
  const snapshot = await store.openSnapshot('');
  try {
    const state = new Map<string, string>();
    for (let page = await snapshotPage(snapshot, 50); page.length > 0; page = await snapshotPage(snapshot, 50)) {
      for (const entry of page) state.set(entry.key, entry.value);
      await turn();
    }
    return { offset: snapshot.offset, state };
  } finally {
    snapshot.close();
  }
}

/**
 * A client that keeps a copy of the state: from a snapshot (or from offset 0 with
 * nothing), it applies pages of changes; whenever its position is below the horizon it
 * re-snapshots, as a 410 offset_compacted tells it to. It stops once it has caught up
 * with `last()`, the offset of the last write (null while writers still run).
 */
async function follow(store: LogStore, fromScratch: boolean, last: () => number | null) {
  let position = 0;
  let state = new Map<string, string>();
  let resnapshots = 0;
  const resnapshot = async () => {
    ({ offset: position, state } = await slowSnapshot(store));
  };
  if (!fromScratch) await resnapshot();
  for (;;) {
    const page = await store.readChanges({ after: position, prefix: '', limit: 200 });
    if (page.horizon > position) {
      resnapshots += 1;
      await resnapshot();
      continue;
    }
    applyRecords(state, page.records);
    position = page.records.at(-1)?.offset ?? page.head;
    const end = last();
    if (page.records.length === 0 && end !== null && position >= end) return { state, resnapshots };
    await turn();
  }
}

describe('readers and writers during a compaction run', () => {
  it('all stay correct', async () => {
    let filled = new Map<string, string>();
    t = await startApp(
      { STATELOG_TOMBSTONE_RETENTION_MS: '0' },
      { seed: async (database) => (filled = await database.fillLog({ records: FILLED, keys: KEYS, deletedKeys: DELETED })) },
    );
    const store = t.app.services.store;

    const written: StoredRecord[] = [];
    let running = true;
    let writesDuringRun = 0;
    const writer = async (seed: number) => {
      for (let i = 0; running; i++) {
        // Never the first UNTOUCHED deleted keys: however long the run takes, their delete
        // markers are still the keys' last records when it reaches them.
        const key = keyName(UNTOUCHED + ((seed * 7919 + i * 104_729) % (KEYS + 200 - UNTOUCHED)));
        if (i % 10 === 9) {
          const res = await t.http.delete(`/v1/keys/${key}`);
          if (res.status === 200) written.push({ offset: res.body.offset, key, op: 'delete', value: null, ts: 0 });
          else expect(res.status).toBe(404);
        } else {
          const res = await t.http.put(`/v1/keys/${key}`).set(json).send({ value: { seed, i } });
          expect(res.status).toBe(200);
          written.push({ offset: res.body.offset, key, op: 'set', value: JSON.stringify({ seed, i }), ts: 0 });
        }
        if (t.app.services.compactor.running) writesDuringRun += 1;
      }
    };
    const snapshots: Array<{ offset: number; state: Map<string, string> }> = [];
    const snapshotter = async () => {
      while (running) snapshots.push(await slowSnapshot(store));
    };

    const run = t.app.services.compactor.run();
    const writers = [1, 2, 3].map(writer);
    // Writes still in flight when the writers are told to stop commit after it: the
    // followers wait for the last of them, not for the stop.
    let lastWrite: number | null = null;
    const readers = [follow(store, true, () => lastWrite), follow(store, false, () => lastWrite)];
    const snapshotting = snapshotter();
    const summary = await run;
    // A little more traffic after the run, then everyone stops.
    for (let i = 0; i < 20; i++) await turn();
    running = false;
    await Promise.all([...writers, snapshotting]);
    lastWrite = Math.max(FILLED, ...written.map((w) => w.offset));
    const followers = await Promise.all(readers);

    // The run did its work while the writes were flowing.
    expect(summary.removed).toBeGreaterThan(FILLED - KEYS - 1);
    // The delete markers no write touched go; one that a write superseded before the run
    // reached it is kept, as that key's one record older than the minimum lag.
    expect(summary.tombstonesRemoved).toBeGreaterThanOrEqual(UNTOUCHED);
    expect(summary.tombstonesRemoved).toBeLessThanOrEqual(DELETED);
    expect(writesDuringRun).toBeGreaterThan(10);

    // Every acknowledged write is in the current state, in offset order.
    written.sort((a, b) => a.offset - b.offset);
    expect(new Set(written.map((w) => w.offset)).size).toBe(written.length);
    const stateAt = (offset: number) =>
      applyRecords(
        new Map(filled),
        written.filter((w) => w.offset <= offset),
      );
    const current = stateAt(Number.MAX_SAFE_INTEGER);
    expect(await currentState(store)).toEqual(current);
    expect(store.position().head).toBe(written.at(-1)!.offset);

    // Each snapshot is exactly the state at its offset.
    expect(snapshots.length).toBeGreaterThan(1);
    for (const snapshot of snapshots) expect(snapshot.state).toEqual(stateAt(snapshot.offset));

    // Both followers caught up; the one replaying from 0 had to re-snapshot once the
    // horizon passed it, or kept ahead of it.
    for (const follower of followers) expect(follower.state).toEqual(current);

    // The counters are exact, and the log keeps every surviving write.
    expect(await keptCounters(store)).toEqual(await t.database.counted());
    const survivors = await allRecords(store);
    const byOffset = new Map(written.map((w) => [w.offset, w]));
    for (const record of survivors.filter((r) => r.offset > FILLED)) {
      expect({ ...record, ts: 0 }).toEqual(byOffset.get(record.offset));
    }
  }, 120_000);
});
