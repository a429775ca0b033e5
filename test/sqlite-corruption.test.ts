// A corrupt SQLite file (five pages overwritten in the middle) is never a passing
// outage: the start-up check refuses it with one line; with the check skipped, the
// first request that meets a bad page answers 500 `internal`, the log says at error
// that the database is corrupt, /readyz turns 503 with the reason and stays so, a
// snapshot is refused, and POST /v1/admin/compact answers 500, not "retry later".
import { randomBytes } from 'node:crypto';
import { closeSync, openSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fillLog } from '../harness/fill-log.js';
import { tempDir } from './support/helpers.js';
import { runServerExpectingExit, spawnServer, type UrlServer } from './support/child-server.js';

const PAGE = 4096;
const dir = tempDir();
const dbPath = join(dir, 'corrupt.db');
let server: UrlServer | undefined;

beforeAll(() => {
  // Every key written twice: the log's first half is superseded records, its second half
  // the live ones, so its middle pages hold both.
  fillLog(dbPath, { records: 40_000, keys: 20_000 });
  const db = new Database(dbPath, { readonly: true });
  const leaves = db.prepare("SELECT pageno FROM dbstat WHERE name = 'log' AND pagetype = 'leaf' ORDER BY pageno").pluck().all() as number[];
  db.close();
  const fd = openSync(dbPath, 'r+');
  const middle = Math.floor(leaves.length / 2);
  for (const page of leaves.slice(middle - 2, middle + 3)) writeSync(fd, randomBytes(PAGE), 0, PAGE, (page - 1) * PAGE);
  closeSync(fd);
});
afterAll(() => {
  server?.proc.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

describe('a corrupt database file', () => {
  it('is refused at start-up with one line naming the file', async () => {
    const { code, stderr } = await runServerExpectingExit({ STATELOG_DB: dbPath });
    expect(code).toBe(1);
    const lines = stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(dbPath);
    expect(lines[0]).toMatch(/corrupt/);
  });

  it('with the check skipped: 500 internal, readiness 503 with the reason for good, logged as corruption', async () => {
    server = await spawnServer({ STATELOG_DB: dbPath, STATELOG_STARTUP_CHECK_MAX_BYTES: '0' });
    // A snapshot reads every live key, bad pages included: refused whole, never cut short
    // as if complete.
    const snapshot = await fetch(`${server.url}/v1/snapshot`);
    expect(snapshot.status).toBe(500);
    expect(((await snapshot.json()) as { error: { code: string } }).error.code).toBe('internal');

    const ready = await fetch(`${server.url}/readyz`);
    expect(ready.status).toBe(503);
    const reason = ((await ready.json()) as { error: { reason: string; message: string } }).error;
    expect(reason.reason).toBe('corrupt');
    expect(reason.message).toMatch(/corrupt/);

    const compact = await fetch(`${server.url}/v1/admin/compact`, { method: 'POST' });
    expect(compact.status).toBe(500);
    expect(((await compact.json()) as { error: { code: string } }).error.code).toBe('internal');

    // A change stream that reaches the bad pages is cut, never ended as if all were sent.
    const stream = await fetch(`${server.url}/v1/changes/stream?after=0`, { signal: AbortSignal.timeout(10_000) });
    expect(stream.status).toBe(200);
    const body = await stream.text().then(
      () => 'ended',
      (err: Error) => (err.name === 'TimeoutError' ? 'went on' : 'cut'),
    );
    expect(body).toBe('cut');

    const logged = server.logs().filter((line) => line.level === 50 && /database is corrupt/.test(String(line.msg)));
    expect(logged.length).toBeGreaterThan(0);
    // Still unready a while later: corruption does not pass.
    expect((await fetch(`${server.url}/readyz`)).status).toBe(503);
  });
});
