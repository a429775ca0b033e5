// Fills a statelog database fast, by SQL through the store's own schema (its migrations
// create the tables), for tests and benchmarks that need millions of records. The
// counters in `meta` are set exactly, as the store would have kept them. fillLog writes
// a SQLite file; test/support/store-access.ts writes the same log into PostgreSQL.
import Database from 'better-sqlite3';
import { SqliteStore } from '../src/store/sqlite/store.js';

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

export interface FilledRecord {
  seq: number;
  key: string;
  /** JSON text; null for a delete marker. */
  value: string | null;
  ts: number;
}

/** What a fill writes: the records in offset order, the state rows, and the counters. */
export interface FillPlan {
  records(): Generator<FilledRecord>;
  state: { key: string; seq: number; live: boolean }[];
  meta: { head: number; lastTs: number; records: number; stateKeys: number; liveKeys: number };
  /** The expected current value of every live key. */
  current: Map<string, string>;
}

/**
 * `records` records over `keys` keys: rounds in which every key is written once, in a
 * shuffled order, so each key has records / keys versions and its latest record lies in
 * the last round.
 */
export function planFill(options: FillOptions): FillPlan {
  const { records, keys } = options;
  const deletedKeys = options.deletedKeys ?? 0;
  if (records % keys !== 0) throw new Error('records must be a multiple of keys');
  const lastTs = options.lastTs ?? Date.now();
  const rounds = records / keys;
  const state: FillPlan['state'] = [];
  const current = new Map<string, string>();
  // Each key's latest record is its place in the last round.
  const lastRound = shuffled(keys, rounds);
  const latest = new Uint32Array(keys);
  lastRound.forEach((keyIndex, position) => (latest[keyIndex] = records - keys + position + 1));
  for (let keyIndex = 0; keyIndex < keys; keyIndex++) {
    const live = keyIndex >= deletedKeys;
    state.push({ key: keyName(keyIndex), seq: latest[keyIndex]!, live });
    if (live) current.set(keyName(keyIndex), valueOf(keyIndex, rounds - 1));
  }
  function* all(): Generator<FilledRecord> {
    let seq = 0;
    for (let round = 0; round < rounds; round++) {
      for (const keyIndex of shuffled(keys, round + 1)) {
        seq += 1;
        const deleted = round === rounds - 1 && keyIndex < deletedKeys;
        yield { seq, key: keyName(keyIndex), value: deleted ? null : valueOf(keyIndex, round), ts: lastTs - records + seq };
      }
    }
  }
  return {
    records: all,
    state,
    meta: { head: records, lastTs, records, stateKeys: keys, liveKeys: keys - deletedKeys },
    current,
  };
}

/**
 * Writes planFill's log into a new SQLite database at `path`.
 * Returns the expected current value of every live key.
 */
export function fillLog(path: string, options: FillOptions): Map<string, string> {
  const plan = planFill(options);
  void new SqliteStore({ path, sync: 'normal', idempotencyTtlMs: 1 }).close();

  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = OFF');
  db.pragma('cache_size = -262144');
  const insert = db.prepare('INSERT INTO log (seq, key, op, value, ts) VALUES (?, ?, ?, ?, ?)');
  const setState = db.prepare('INSERT INTO state (key, seq, live) VALUES (?, ?, ?)');
  db.transaction(() => {
    for (const r of plan.records()) insert.run(r.seq, r.key, r.value === null ? 'delete' : 'set', r.value, r.ts);
    for (const row of plan.state) setState.run(row.key, row.seq, row.live ? 1 : 0);
    db.prepare(
      'UPDATE meta SET head = @head, last_ts = @lastTs, records = @records, state_keys = @stateKeys, live_keys = @liveKeys WHERE id = 1',
    ).run(plan.meta);
  })();
  db.pragma('wal_checkpoint(TRUNCATE)');
  db.close();
  return plan.current;
}
