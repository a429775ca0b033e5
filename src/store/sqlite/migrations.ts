// Applies the numbered SQL files in migrations/sqlite/ in order, each in its own
// transaction, and records them. Any failure throws: start-up must stop loudly.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type Database from 'better-sqlite3';
import { listMigrations, MigrationError } from '../migration-files.js';

export { listMigrations, MigrationError };

export const SQLITE_MIGRATIONS_DIR = fileURLToPath(new URL('../../../migrations/sqlite/', import.meta.url));

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
