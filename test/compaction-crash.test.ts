// kill -9 in the middle of a large compaction run: after a restart the state is the
// same, the counters are exact, and a new run finishes the job.
import { rmSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { startChildServer, type KillableServer as ChildServer } from './support/child-server.js';
import { keyName } from '../harness/fill-log.js';
import { tempDir, testStore, TEST_STORE, type TestStore } from './support/helpers.js';
import { currentState, keptCounters } from './support/store-helpers.js';

// PostgreSQL compacts about ten times slower than SQLite (some 12,000 records a second
// on a small machine): a smaller log there still takes a hundred steps of 2,000 records,
// so the kill lands in the middle of a run all the same.
const RECORDS = TEST_STORE === 'postgres' ? 200_000 : 2_000_000;
const KEYS = 1_000;
const DELETED = 100;

const dir = tempDir();
let database: TestStore | undefined;
let server: ChildServer | undefined;
afterAll(async () => {
  if (server) await server.kill('SIGKILL');
  await database?.drop();
  rmSync(dir, { recursive: true, force: true });
});

async function checkRecovered(db: TestStore, expected: Map<string, string>) {
  const store = await db.openStore();
  try {
    expect(await keptCounters(store)).toEqual(await db.counted());
    expect(await currentState(store)).toEqual(expected);
    return { ...(await store.counters()), ...store.position() };
  } finally {
    await store.close();
  }
}

describe('a crash during compaction', () => {
  it('loses nothing, keeps the counters exact, and the next run finishes the job', async () => {
    const db = (database = await testStore(dir));
    const expected = await db.fillLog({ records: RECORDS, keys: KEYS, deletedKeys: DELETED });
    server = await startChildServer({
      ...db.env,
      STATELOG_COMPACT_INTERVAL_MS: '50',
      STATELOG_TOMBSTONE_RETENTION_MS: '0',
    });

    // Kill it once the timed run has committed some steps (the meta row is read on a
    // connection of our own while the server runs).
    await expect.poll(async () => (await db.meta()).records, { interval: 5, timeout: 60_000 }).toBeLessThan(RECORDS);
    await server.kill('SIGKILL');
    server = undefined;

    const afterCrash = await checkRecovered(db, expected);
    expect(afterCrash.records, 'the run was killed before it finished').toBeGreaterThan(KEYS);
    expect(afterCrash.records).toBeLessThan(RECORDS);
    expect(afterCrash.head).toBe(RECORDS);

    server = await startChildServer({ ...db.env, STATELOG_COMPACT_INTERVAL_MS: '0', STATELOG_TOMBSTONE_RETENTION_MS: '0' });
    const answer = await fetch(`${server.url}/v1/admin/compact`, { method: 'POST' });
    expect(answer.status).toBe(200);
    const body = (await answer.json()) as { removed: number; tombstonesRemoved: number; head: number; horizon: number };
    expect(body.removed).toBe(afterCrash.records - (KEYS - DELETED));
    expect(body.head).toBe(RECORDS);
    const value = await fetch(`${server.url}/v1/keys/${keyName(KEYS - 1)}`);
    expect(((await value.json()) as { value: unknown }).value).toEqual(JSON.parse(expected.get(keyName(KEYS - 1))!));
    expect(await server.kill('SIGTERM')).toBe(0);
    server = undefined;

    const finished = await checkRecovered(db, expected);
    expect(finished).toMatchObject({ records: KEYS - DELETED, liveKeys: KEYS - DELETED, tombstones: 0, head: RECORDS });
    // Every delete marker went; the horizon is the highest of them, and it was stored.
    expect(finished.horizon).toBe(body.horizon);
    expect(finished.horizon).toBeGreaterThan(RECORDS - KEYS);
  }, 180_000);
});
