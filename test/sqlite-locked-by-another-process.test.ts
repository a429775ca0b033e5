// Another process holds the database's write lock: an operator's sqlite3 shell in a
// transaction, a backup tool. (A second statelog server is refused at start-up by the
// process lock; other programs can still open the file.) A write waits for the lock for
// the store's busy timeout, then gets 503 `unavailable` with Retry-After, not 500, and is
// not applied; once the lock is let go, writes go on.
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnServer, type UrlServer } from './support/child-server.js';
import { tempDir } from './support/helpers.js';

const dir = tempDir();
const dbPath = join(dir, 'locked.db');
let server: UrlServer;

beforeAll(async () => {
  server = await spawnServer({ STATELOG_DB: dbPath, STATELOG_SYNC: 'full' });
});
afterAll(() => {
  server?.proc.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

const put = (key: string, value: unknown) =>
  fetch(`${server.url}/v1/keys/${key}`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ value }) });

describe('the write lock held by another process', () => {
  it('answers a write 503 with Retry-After once the busy timeout passes, applies nothing, and writes again after', async () => {
    expect((await put('before', 1)).status).toBe(200);
    const other = new Database(dbPath, { fileMustExist: true });
    try {
      other.exec('BEGIN IMMEDIATE');
      const refused = await put('during', 2);
      expect(refused.status).toBe(503);
      expect(refused.headers.get('retry-after')).toBeTruthy();
      expect(((await refused.json()) as { error: { code: string } }).error.code).toBe('unavailable');
      other.exec('ROLLBACK');
    } finally {
      other.close();
    }
    expect((await fetch(`${server.url}/v1/keys/during`)).status).toBe(404);
    expect((await put('after', 3)).status).toBe(200);
    const stats = (await (await fetch(`${server.url}/v1/stats`)).json()) as { liveKeys: number };
    expect(stats.liveKeys).toBe(2);
  }, 30_000);
});
