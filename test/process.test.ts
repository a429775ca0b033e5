// The server process: start-up refusals, migrations that fail loudly, graceful shutdown.
import { copyFileSync, existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { tempDir } from './support/helpers.js';
import { runServerExpectingExit } from './support/child-server.js';
import { MigrationError, migrate, SQLITE_MIGRATIONS_DIR } from '../src/store/sqlite/migrations.js';

let dir: string;
afterEach(() => {
  if (dir && existsSync(dir)) rmSync(dir, { recursive: true, force: true });
});

describe('start-up', () => {
  it.each([
    ['STATELOG_SYNC', 'sometimes'],
    ['PORT', '70000'],
    ['STATELOG_MIN_DIRTY_RATIO', '1.5'],
    ['STATELOG_COMPACT_INTERVAL_MS', '-5'],
    ['STATELOG_TOKENS', 'superuser:abc'],
    ['LOG_LEVEL', 'loud'],
  ])('refuses %s=%s with one line naming it, exit 1, nothing written', async (name, value) => {
    dir = tempDir();
    const dbPath = join(dir, 'sub', 'never.db');
    const { code, stderr, stdout } = await runServerExpectingExit({ STATELOG_DB: dbPath, [name]: value });
    expect(code).toBe(1);
    const lines = stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(name);
    expect(stdout).toBe('');
    expect(existsSync(join(dir, 'sub'))).toBe(false);
  });

  it('stops loudly, exit 1, when a migration fails', async () => {
    dir = tempDir();
    const migrations = join(dir, 'migrations');
    mkdirSync(migrations);
    copyFileSync(join(SQLITE_MIGRATIONS_DIR, '001_log.sql'), join(migrations, '001_log.sql'));
    writeFileSync(join(migrations, '002_broken.sql'), 'ALTER TABLE no_such_table ADD COLUMN x INTEGER;');
    const db = new Database(join(dir, 'm.db'));
    expect(() => migrate(db, migrations)).toThrow(MigrationError);
    expect(() => migrate(db, migrations)).toThrow(/002_broken\.sql/);
    // 001 stays applied, 002 left nothing behind.
    const applied = db.prepare('SELECT version FROM schema_migrations').pluck().all();
    expect(applied).toEqual([1]);
    db.close();
  });

  it('refuses a database file it cannot use, exit 1', async () => {
    dir = tempDir();
    const dbPath = join(dir, 'garbage.db');
    writeFileSync(dbPath, 'this is not a database'.repeat(100));
    const { code, stderr } = await runServerExpectingExit({ STATELOG_DB: dbPath });
    expect(code).toBe(1);
    expect(stderr).toMatch(/cannot open the database/);
  });
});
