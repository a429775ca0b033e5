// Fills a statelog database fast, with direct SQL in one transaction through the
// store's own schema (its migrations create the tables), for tests and benchmarks
// that need millions of records. The counters in `meta` are set exactly, as the
// store would have kept them.
import Database from 'better-sqlite3';
import { SqliteStore } from '../src/store/sqlite-store.js';

export interface FillOptions {
  records: number;
  keys: number;
  /** The last record of keys 0 .. deletedKeys-1 is a delete marker. */
  deletedKeys?: number;
  /** Commit time of the last record; earlier records are one millisecond apart. */
  lastTs?: number;
}

export function keyName(index: number): string {
  return `key-${String(index).padStart(6, '0')}`;
}

export function valueOf(keyIndex: number, version: number): string {
  return `{"k":${keyIndex},"v":${version}}`;
}

/** A small deterministic generator, so every fill of the same size is the same log. */
function shuffled(count: number, seed: number): Uint32Array {
  const order = new Uint32Array(count);
  for (let i = 0; i < count; i++) order[i] = i;
  let state = seed >>> 0 || 1;
  for (let i = count - 1; i > 0; i--) {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    const j = (state >>> 0) % (i + 1);
    const swap = order[i]!;
    order[i] = order[j]!;
    order[j] = swap;
  }
  return order;
}

/**
 * Writes `records` records over `keys` keys into a new database at `path`: rounds in
 * which every key is written once, in a shuffled order, so each key has
 * records / keys versions and its latest record lies in the last round.
 * Returns the expected current value of every live key.
 */
export function fillLog(path: string, options: FillOptions): Map<string, string> {
  const { records, keys } = options;
  const deletedKeys = options.deletedKeys ?? 0;
  if (records % keys !== 0) throw new Error('records must be a multiple of keys');
  const lastTs = options.lastTs ?? Date.now();
  void new SqliteStore({ path, sync: 'normal', idempotencyTtlMs: 1 }).close();

  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = OFF');
  db.pragma('cache_size = -262144');
  const insert = db.prepare('INSERT INTO log (seq, key, op, value, ts) VALUES (?, ?, ?, ?, ?)');
  const setState = db.prepare('INSERT INTO state (key, seq, live) VALUES (?, ?, ?)');
  const latest = new Uint32Array(keys);
  const current = new Map<string, string>();
  const rounds = records / keys;
  db.transaction(() => {
    let seq = 0;
    for (let round = 0; round < rounds; round++) {
      const lastRound = round === rounds - 1;
      for (const keyIndex of shuffled(keys, round + 1)) {
        seq += 1;
        const deleted = lastRound && keyIndex < deletedKeys;
        const value = deleted ? null : valueOf(keyIndex, round);
        insert.run(seq, keyName(keyIndex), deleted ? 'delete' : 'set', value, lastTs - records + seq);
        latest[keyIndex] = seq;
      }
    }
    for (let keyIndex = 0; keyIndex < keys; keyIndex++) {
      const live = keyIndex < deletedKeys ? 0 : 1;
      setState.run(keyName(keyIndex), latest[keyIndex], live);
      if (live) current.set(keyName(keyIndex), valueOf(keyIndex, rounds - 1));
    }
    db.prepare(
      'UPDATE meta SET head = ?, last_ts = ?, records = ?, state_keys = ?, live_keys = ? WHERE id = 1',
    ).run(records, lastTs, records, keys, keys - deletedKeys);
  })();
  db.pragma('wal_checkpoint(TRUNCATE)');
  db.close();
  return current;
}
