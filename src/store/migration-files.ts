// The numbered SQL files of a migrations folder, shared by the SQLite and PostgreSQL
// migration runners: names look like 001_name.sql and are applied in number order.
import { readdirSync } from 'node:fs';

export class MigrationError extends Error {
  constructor(file: string, cause: unknown) {
    super(`migration ${file} failed: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
    this.name = 'MigrationError';
  }
}

export interface MigrationFile {
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
