// kill -9 in the middle of a large compaction run: after a restart the state is the
// same, the counters are exact, and a new run finishes the job.
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { startChildServer, type ChildServer } from './child-server.js';
import { fillLog, keyName } from './fill-log.js';
import { tempDir } from './helpers.js';
import { countedFromTables, currentState, keptCounters, openStore } from './store-helpers.js';

const RECORDS = 2_000_000;
const KEYS = 1_000;
const DELETED = 100;

const dir = tempDir();
const dbPath = join(dir, 'statelog.db');
let server: ChildServer | undefined;
afterAll(async () => {
  if (server) await server.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

/** The meta row's record count, read on a connection of our own while the server runs. */
function recordsCounter(): () => number {
  const db = new Database(dbPath, { readonly: true });
  const read = db.prepare('SELECT records FROM meta WHERE id = 1').pluck();
  return () => read.get() as number;
}

async function checkRecovered(expected: Map<string, string>) {
  const store = openStore(dir);
  try {
    expect(await keptCounters(store)).toEqual(countedFromTables(store));
    expect(await currentState(store)).toEqual(expected);
    return { ...(await store.counters()), ...store.position() };
  } finally {
    await store.close();
  }
}

describe('a crash during compaction', () => {
  it('loses nothing, keeps the counters exact, and the next run finishes the job', async () => {
    const expected = fillLog(dbPath, { records: RECORDS, keys: KEYS, deletedKeys: DELETED });
    server = await startChildServer({
      STATELOG_DB: dbPath,
      STATELOG_COMPACT_INTERVAL_MS: '50',
      STATELOG_TOMBSTONE_RETENTION_MS: '0',
    });

    // Kill it once the timed run has committed some steps.
    const records = recordsCounter();
    await expect.poll(records, { interval: 5, timeout: 60_000 }).toBeLessThan(RECORDS);
    await server.kill('SIGKILL');
    server = undefined;

    const afterCrash = await checkRecovered(expected);
    expect(afterCrash.records, 'the run was killed before it finished').toBeGreaterThan(KEYS);
    expect(afterCrash.records).toBeLessThan(RECORDS);
    expect(afterCrash.head).toBe(RECORDS);

    server = await startChildServer({ STATELOG_DB: dbPath, STATELOG_COMPACT_INTERVAL_MS: '0', STATELOG_TOMBSTONE_RETENTION_MS: '0' });
    const answer = await fetch(`${server.url}/v1/admin/compact`, { method: 'POST' });
    expect(answer.status).toBe(200);
    const body = (await answer.json()) as { removed: number; tombstonesRemoved: number; head: number; horizon: number };
    expect(body.removed).toBe(afterCrash.records - (KEYS - DELETED));
    expect(body.head).toBe(RECORDS);
    const value = await fetch(`${server.url}/v1/keys/${keyName(KEYS - 1)}`);
    expect(((await value.json()) as { value: unknown }).value).toEqual(JSON.parse(expected.get(keyName(KEYS - 1))!));
    expect(await server.kill('SIGTERM')).toBe(0);
    server = undefined;

    const finished = await checkRecovered(expected);
    expect(finished).toMatchObject({ records: KEYS - DELETED, liveKeys: KEYS - DELETED, tombstones: 0, head: RECORDS });
    // Every delete marker went; the horizon is the highest of them, and it was stored.
    expect(finished.horizon).toBe(body.horizon);
    expect(finished.horizon).toBeGreaterThan(RECORDS - KEYS);
  }, 180_000);
});
