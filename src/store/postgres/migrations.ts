// Applies migrations/postgres/ in order, each in its transaction; nodes starting together take turns
// through an advisory lock, and any failure stops the start-up.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { listMigrations, MigrationError } from '../migration-files.js';

export const PG_MIGRATIONS_DIR = fileURLToPath(new URL('../../../migrations/postgres/', import.meta.url));

/** Advisory lock keys (two int4 keys: statelog's namespace, then the purpose). */
export const LOCK_NAMESPACE = 0x57a7e106;
export const MIGRATION_LOCK = 1;

export async function migratePostgres(client: pg.ClientBase, dir = PG_MIGRATIONS_DIR): Promise<number[]> {
  const migrations = listMigrations(dir);
  // Key order and prefix ranges rely on UTF-8 bytes under COLLATE "C".
  const { rows } = await client.query<{ server_encoding: string }>('SHOW server_encoding');
  if (rows[0]?.server_encoding !== 'UTF8') {
    throw new MigrationError(
      migrations[0]?.file ?? '(none)',
      new Error(`the database encoding is ${rows[0]?.server_encoding}; statelog needs UTF8`),
    );
  }
  await client.query('SELECT pg_advisory_lock($1, $2)', [LOCK_NAMESPACE, MIGRATION_LOCK]);
  try {
    await client.query(`CREATE TABLE IF NOT EXISTS schema_migrations (
      version integer PRIMARY KEY,
      name text NOT NULL,
      applied_at bigint NOT NULL
    )`);
    const applied = new Set(
      (await client.query<{ version: number }>('SELECT version FROM schema_migrations')).rows.map((r) => r.version),
    );
    const done: number[] = [];
    for (const { version, file } of migrations) {
      if (applied.has(version)) continue;
      const sql = readFileSync(`${dir}/${file}`, 'utf8');
      try {
        await client.query('BEGIN');
        await client.query(sql);
        await client.query('INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)', [
          version,
          file,
          Date.now(),
        ]);
        await client.query('COMMIT');
      } catch (err) {
        await client.query('ROLLBACK').catch(() => {});
        throw new MigrationError(file, err);
      }
      done.push(version);
    }
    return done;
  } finally {
    await client.query('SELECT pg_advisory_unlock($1, $2)', [LOCK_NAMESPACE, MIGRATION_LOCK]).catch(() => {});
  }
}
