// Checkpoints in a worker thread, on a real database, while the store keeps writing.
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SqliteCheckpointer } from '../src/store/sqlite/checkpointer.js';
import type { SqliteStore } from '../src/store/sqlite/store.js';
import { tempDir } from './support/helpers.js';
import { write } from './support/store-helpers.js';
import { openSqliteStore } from './support/store-access.js';

let dir: string;
let store: SqliteStore;
let checkpointer: SqliteCheckpointer;
beforeEach(() => {
  dir = tempDir();
  store = openSqliteStore(join(dir, 'statelog.db'));
  checkpointer = new SqliteCheckpointer(join(dir, 'statelog.db'));
});
afterEach(async () => {
  checkpointer.close();
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

const writeSome = async (count: number) => {
  for (let i = 0; i < count; i++) await write(store, [{ op: 'set', key: `k${i % 7}`, value: String(i) }], 1_000 + i);
};

describe('the checkpointer', () => {
  it('copies the WAL into the database file from its own thread', async () => {
    await writeSome(50);
    const first = await checkpointer.checkpoint();
    expect(first.log).toBeGreaterThan(0);
    expect(first).toMatchObject({ busy: 0, checkpointed: first.log });
  });

  it('never waits for an open snapshot, and the store keeps writing meanwhile', async () => {
    await writeSome(10);
    const snapshot = await store.openSnapshot('');
    try {
      await writeSome(20);
      const [result] = await Promise.all([checkpointer.checkpoint(), writeSome(20)]);
      // Frames after the snapshot's view stay in the WAL until it closes.
      expect(result.checkpointed).toBeLessThan(result.log);
      expect(store.position().head).toBe(50);
    } finally {
      snapshot.close();
    }
    // The snapshot's connection, in the snapshot worker, ends its transaction a message later.
    await expect.poll(async () => {
      const after = await checkpointer.checkpoint();
      return after.checkpointed === after.log;
    }).toBe(true);
  });

  it('refuses work once closed', async () => {
    checkpointer.close();
    await expect(checkpointer.checkpoint()).rejects.toThrow('closed');
  });
});
