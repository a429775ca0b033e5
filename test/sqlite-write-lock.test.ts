// The store's write transactions meet the WAL's write lock held by another connection of
// the same file for a moment, as the checkpoint and snapshot threads' connections take it
// when they catch the WAL index mid-update: they wait for it, they do not fail. Held
// here for longer than those moments, so that every write meets it.
import { rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { SqliteStore } from '../src/store/sqlite/store.js';
import { tempDir } from './support/helpers.js';
import { compactorFor, currentState, write } from './support/store-helpers.js';
import { openSqliteStore } from './support/store-access.js';

const HOLD_MS = 300;

// A connection of its own in a worker thread: BEGIN IMMEDIATE takes the write lock, and
// the thread sleeps before it lets go, writing nothing.
const HOLDER = `
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.driver);
const db = new Database(workerData.path, { fileMustExist: true });
db.exec('BEGIN IMMEDIATE');
parentPort.postMessage('locked');
Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, workerData.ms);
db.exec('ROLLBACK');
db.close();
`;

const driver = createRequire(import.meta.url).resolve('better-sqlite3');

/** Resolves once another connection holds the write lock; `released` once the thread has ended. */
async function holdWriteLock(path: string, ms: number): Promise<{ released: Promise<number> }> {
  const worker = new Worker(HOLDER, { eval: true, workerData: { path, driver, ms } });
  const released = new Promise<number>((resolve) => worker.once('exit', resolve));
  await new Promise<void>((resolve, reject) => {
    worker.once('message', () => resolve());
    worker.once('error', reject);
  });
  return { released };
}

let dir: string;
let path: string;
let store: SqliteStore;
beforeEach(() => {
  dir = tempDir();
  path = join(dir, 'statelog.db');
  store = openSqliteStore(path);
});
afterEach(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

describe("the store's write transactions and another connection's write lock", () => {
  it('a group commit that reads a key before it writes waits for the lock', async () => {
    await write(store, [{ op: 'set', key: 'known', value: '1' }]);
    const lock = await holdWriteLock(path, HOLD_MS);
    const started = performance.now();
    // A key the entry cache has never seen: the group reads its state row, then writes.
    const outcome = await write(store, [{ op: 'set', key: 'unseen', value: '2', ifAbsent: true }]);
    expect(outcome).toMatchObject({ ok: true });
    expect(performance.now() - started).toBeGreaterThan(HOLD_MS / 2);
    expect(await lock.released).toBe(0);
    expect(await currentState(store)).toEqual(new Map([['known', '1'], ['unseen', '2']]));
  });

  it('a compaction step waits for the lock, and the run completes', async () => {
    for (let i = 0; i < 200; i++) await write(store, [{ op: 'set', key: `k${i % 10}`, value: String(i) }]);
    const lock = await holdWriteLock(path, HOLD_MS);
    const result = await compactorFor(store).run();
    expect(result.removed).toBe(190);
    expect(await lock.released).toBe(0);
    expect((await currentState(store)).size).toBe(10);
  });
});
