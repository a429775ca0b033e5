// Applies the numbered SQL files in migrations/sqlite/ in order, each in its own
// transaction, and records them. Any failure throws: start-up must stop loudly.
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type Database from 'better-sqlite3';

export const SQLITE_MIGRATIONS_DIR = fileURLToPath(new URL('../../migrations/sqlite/', import.meta.url));

export class MigrationError extends Error {
  constructor(file: string, cause: unknown) {
    super(`migration ${file} failed: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
    this.name = 'MigrationError';
  }
}

interface MigrationFile {
  version: number;
  file: string;
}

export function listMigrations(dir: string): MigrationFile[] {
  const files = readdirSync(dir).filter((name) => name.endsWith('.sql'));
  const migrations = files.map((file) => {
    const match = /^(\d+)_[\w-]+\.sql$/.exec(file);
    if (!match) throw new MigrationError(file, new Error('name must look like 001_name.sql'));
    return { version: Number(match[1]), file };
  });
  migrations.sort((a, b) => a.version - b.version);
  for (let i = 1; i < migrations.length; i++) {
    if (migrations[i]!.version === migrations[i - 1]!.version) {
      throw new MigrationError(migrations[i]!.file, new Error('duplicate version number'));
    }
  }
  return migrations;
}

/** Returns the versions it applied. */
export function migrate(db: Database.Database, dir = SQLITE_MIGRATIONS_DIR): number[] {
  db.exec(`CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at INTEGER NOT NULL
  )`);
  const applied = new Set(
    db
      .prepare('SELECT version FROM schema_migrations')
      .pluck()
      .all()
      .map((v) => Number(v)),
  );
  const record = db.prepare('INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)');
  const done: number[] = [];
  for (const { version, file } of listMigrations(dir)) {
    if (applied.has(version)) continue;
    const sql = readFileSync(`${dir}/${file}`, 'utf8');
    try {
      db.transaction(() => {
        db.exec(sql);
        record.run(version, file, Date.now());
      })();
    } catch (err) {
      throw new MigrationError(file, err);
    }
    done.push(version);
  }
  return done;
}
