// Fills a fresh database with live keys by direct SQL in one transaction: far faster
// than the HTTP API for the large logs that the memory test and the benchmark need.
// seedLiveKeys writes a SQLite file; test/support/store-access.ts seeds PostgreSQL.
import { openDatabase } from '../src/store/sqlite/store.js';
import { migrate } from '../src/store/sqlite/migrations.js';

export interface SeedOptions {
  count: number;
  /** Keys sort in the same order as their offsets, like a bulk load. */
  key?: (i: number) => string;
  /** JSON text of the i-th value. */
  value?: (i: number) => string;
}

export const seedKey = (i: number): string => `key/${String(i).padStart(9, '0')}`;

/** The i-th seeded key (offset i, from 1) and its value, with the defaults filled in. */
export function seedEntry(options: SeedOptions): (i: number) => { key: string; value: string } {
  const { key = seedKey, value = (i) => `{"n":${i}}` } = options;
  return (i) => ({ key: key(i), value: value(i) });
}

/** Creates the database at `path` (it must not hold records yet) with `count` live keys. */
export function seedLiveKeys(path: string, options: SeedOptions): void {
  const { count } = options;
  const entry = seedEntry(options);
  const db = openDatabase(path);
  try {
    migrate(db);
    const head = db.prepare('SELECT head FROM meta WHERE id = 1').pluck().get() as number;
    if (head !== 0) throw new Error('seedLiveKeys wants an empty database');
    const appendLog = db.prepare("INSERT INTO log (seq, key, op, value, ts) VALUES (?, ?, 'set', ?, ?)");
    const setState = db.prepare('INSERT INTO state (key, seq, live) VALUES (?, ?, 1)');
    const ts = Date.now();
    db.transaction(() => {
      for (let i = 1; i <= count; i++) {
        const { key, value } = entry(i);
        appendLog.run(i, key, value, ts);
        setState.run(key, i);
      }
      db.prepare(
        'UPDATE meta SET head = ?, last_ts = ?, records = ?, state_keys = ?, live_keys = ? WHERE id = 1',
      ).run(count, ts, count, count, count);
    })();
    db.pragma('wal_checkpoint(TRUNCATE)');
  } finally {
    db.close();
  }
}
