// Disk space comes back: a long log compacted down to one record a key takes about the
// room of a fresh database holding the same keys.
import { rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { fillLog } from '../harness/fill-log.js';
import { tempDir } from './support/helpers.js';
import { compactorFor, currentState } from './support/store-helpers.js';
import { openSqliteStore } from './support/store-access.js';

const dir = tempDir();
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The database's size on disk: main file and WAL. */
function bytesOnDisk(file: string): number {
  const size = (path: string) => {
    try {
      return statSync(path).size;
    } catch {
      return 0;
    }
  };
  return size(file) + size(`${file}-wal`);
}

describe('disk space', () => {
  it('a log of 1,000,000 records over 1,000 keys shrinks to at most 2x a fresh database of those keys', async () => {
    const fresh = join(dir, 'fresh.db');
    fillLog(fresh, { records: 1_000, keys: 1_000 });
    const freshBytes = bytesOnDisk(fresh);

    const long = join(dir, 'long.db');
    const latestValues = fillLog(long, { records: 1_000_000, keys: 1_000 });
    const store = openSqliteStore(long);
    try {
      const before = bytesOnDisk(long);
      expect(before).toBeGreaterThan(20 * freshBytes);
      const summary = await compactorFor(store).run();
      expect(summary.removed).toBe(999_000);
      // The compactor itself gave the space back (vacuum and checkpoint), not a close.
      const after = bytesOnDisk(long);
      expect(summary.bytesAfter).toBe(after);
      expect(after, `fresh ${freshBytes} B, before ${before} B, after ${after} B`).toBeLessThanOrEqual(2 * freshBytes);
      expect(await currentState(store)).toEqual(latestValues);
    } finally {
      await store.close();
    }
  }, 120_000);
});
