// The SQLite file as the store opens it (lock, pragmas, check, migrations), its statements,
// and the committed state its write groups are planned from.
import { mkdirSync, statSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import type { LRUCache } from 'lru-cache';
import type { Term } from '../../contract/digest.js';
import type { StoredEntry } from '../log-store.js';
import type { RememberedAnswer, StateSource } from '../write-plan.js';
import { migrate } from './migrations.js';
import { ProcessLock } from './process-lock.js';
import {
  HISTORY_SCAN_END_SQL,
  KEY_HISTORY_SQL,
  KEY_RECORDS_AFTER_SQL,
  LIST_PAGE_SQL,
  LIST_SCAN_END_SQL,
  RECORDS_AFTER_SQL,
} from './sql.js';

/** Log rows a statement inserts: runs of this many save a bind-step-reset a row. */
export const LOG_ROWS_A_STATEMENT = 32;

/** State rows a statement upserts, in key order: SQLite's cursor moves on instead of seeking from the root. */
export const STATE_ROWS_A_STATEMENT = 32;

/** Runs `many` (`size` rows of `width` parameters) on the rows in runs of `size`, and `one` on those left. */
export function runInStatements<T>(
  rows: T[],
  size: number,
  width: number,
  statements: { many: Database.Statement; one: Database.Statement },
  put: (row: T, args: unknown[], at: number) => void,
): void {
  const args: unknown[] = new Array(size * width);
  let i = 0;
  for (; i + size <= rows.length; i += size) {
    for (let j = 0; j < size; j++) put(rows[i + j]!, args, j * width);
    statements.many.run(args);
  }
  args.length = width;
  for (; i < rows.length; i++) {
    put(rows[i]!, args, 0);
    statements.one.run(args);
  }
}

const SET_STATE_SQL = (rows: string) =>
  `INSERT INTO state (key, seq, live, expires_at) VALUES ${rows}
   ON CONFLICT (key) DO UPDATE SET seq = excluded.seq, live = excluded.live, expires_at = excluded.expires_at`;

export function openDatabase(path: string): Database.Database {
  if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
  const db = new Database(path);
  // Before the first table only: the compactor gives pages back with incremental_vacuum, not VACUUM.
  db.pragma('auto_vacuum = INCREMENTAL');
  db.pragma('journal_mode = WAL');
  // With WAL, NORMAL fsyncs only at checkpoints; STATELOG_SYNC=full fsyncs the WAL itself (wal-syncer.ts).
  db.pragma('synchronous = NORMAL');
  db.pragma('busy_timeout = 5000');
  // A big compaction can swell the WAL; truncate it back after checkpoints.
  db.pragma('journal_size_limit = 67108864');
  return db;
}

/** Refuses a corrupt file before serving: quick_check reads every page, so files above `maxBytes` go unchecked. */
function checkIntegrity(db: Database.Database, path: string, maxBytes: number): void {
  if (path === ':memory:' || maxBytes === 0) return;
  const bytes = statSync(path).size;
  if (bytes === 0 || bytes > maxBytes) return;
  const problems = db.pragma('quick_check(3)', { simple: false }) as { quick_check: string }[];
  const found = problems.map((row) => row.quick_check.replace(/\s+/g, ' ').trim()).filter((line) => line !== 'ok');
  if (found.length > 0) throw new Error(`the database file is corrupt (quick_check: ${found.join('; ')})`);
}

/** The lock first (none for :memory:), then the file, checked and migrated; a failure lets go of what was taken. */
export function openStoreFile(path: string, startupCheckMaxBytes: number): { db: Database.Database; lock: ProcessLock | null } {
  let lock: ProcessLock | null = null;
  if (path !== ':memory:') {
    mkdirSync(dirname(path), { recursive: true });
    lock = ProcessLock.acquire(path);
  }
  try {
    const db = openDatabase(path);
    try {
      checkIntegrity(db, path, startupCheckMaxBytes);
      migrate(db);
    } catch (err) {
      db.close();
      throw err;
    }
    return { db, lock };
  } catch (err) {
    lock?.release();
    throw err;
  }
}

/** A cached entry; `term`: its digest term once a write has hashed it, so overwriting it needs no second hash. */
export type CachedEntry = StoredEntry & { term?: Term };

export function stateSource(sql: Statements, entries: LRUCache<string, CachedEntry>): StateSource {
  return {
    state: (key) => {
      // A cached entry is the key's live state; peek: the commit's cache() makes it the most recent anyway.
      const cached = entries.peek(key);
      if (cached) return { offset: cached.offset, live: true, expiresAt: cached.expiresAt ?? null, term: cached.term };
      const row = sql.stateOf.get(key) as { offset: number; live: 0 | 1; expiresAt: number | null } | undefined;
      return row && { offset: row.offset, live: row.live === 1, expiresAt: row.expiresAt };
    },
    liveValue: (key, offset) => {
      const cached = entries.peek(key);
      return cached?.offset === offset ? cached.value : (sql.valueAt.get(offset) as string);
    },
    remembered: (key) => sql.claim.get(key) as RememberedAnswer | undefined,
  };
}

/** The store's statements by name (named here: declarations cannot name better-sqlite3's inferred types). */
export type Statements = Record<StatementName, Database.Statement>;
type StatementName =
  | 'meta'
  | 'saveMeta'
  | 'stateOf'
  | 'valueAt'
  | 'append'
  | 'appendRun'
  | 'setState'
  | 'setStateRun'
  | 'entry'
  | 'list'
  | 'listScanEnd'
  | 'changes'
  | 'keyChanges'
  | 'history'
  | 'historyScanEnd'
  | 'claim'
  | 'remember'
  | 'purge'
  | 'pageCount'
  | 'pageSize'
  | 'oldestTs'
  | 'dueExpiries'
  | 'expiredCount'
  | 'liveTerms'
  | 'saveDigest'
  | 'probe'
  | 'saveRemoval';

export function prepareStatements(db: Database.Database): Statements {
  return {
    meta: db.prepare(
      `SELECT epoch, head, horizon, last_ts AS lastTs, records, state_keys AS stateKeys, live_keys AS liveKeys, digest
       FROM meta WHERE id = 1`,
    ),
    saveMeta: db.prepare(
      `UPDATE meta SET head = @head, last_ts = @lastTs, records = @records,
         state_keys = @stateKeys, live_keys = @liveKeys, digest = @digestText WHERE id = 1`,
    ),
    stateOf: db.prepare('SELECT seq AS offset, live, expires_at AS expiresAt FROM state WHERE key = ?'),
    valueAt: db.prepare('SELECT value FROM log WHERE seq = ?').pluck(),
    append: db.prepare('INSERT INTO log (seq, key, op, value, ts) VALUES (?, ?, ?, ?, ?)'),
    appendRun: db.prepare(`INSERT INTO log (seq, key, op, value, ts) VALUES ${Array(LOG_ROWS_A_STATEMENT).fill('(?, ?, ?, ?, ?)').join(', ')}`),
    setState: db.prepare(SET_STATE_SQL('(?, ?, ?, ?)')),
    setStateRun: db.prepare(SET_STATE_SQL(Array(STATE_ROWS_A_STATEMENT).fill('(?, ?, ?, ?)').join(', '))),
    entry: db.prepare(
      `SELECT s.key, l.value, s.seq AS offset, l.ts, s.expires_at AS expiresAt FROM state s JOIN log l ON l.seq = s.seq
       WHERE s.key = ? AND s.live = 1`,
    ),
    list: db.prepare(LIST_PAGE_SQL),
    listScanEnd: db.prepare(LIST_SCAN_END_SQL).pluck(),
    changes: db.prepare(RECORDS_AFTER_SQL).raw(true),
    keyChanges: db.prepare(KEY_RECORDS_AFTER_SQL).raw(true),
    history: db.prepare(KEY_HISTORY_SQL).raw(true),
    historyScanEnd: db.prepare(HISTORY_SCAN_END_SQL).pluck(),
    claim: db.prepare('SELECT fingerprint, answer, expires_at AS expiresAt FROM idempotency WHERE key = ?'),
    remember: db.prepare(
      'INSERT OR REPLACE INTO idempotency (key, fingerprint, answer, expires_at) VALUES (?, ?, ?, ?)',
    ),
    purge: db.prepare('DELETE FROM idempotency WHERE expires_at < ?'),
    pageCount: db.prepare('PRAGMA page_count').pluck(),
    pageSize: db.prepare('PRAGMA page_size').pluck(),
    oldestTs: db.prepare('SELECT ts FROM log ORDER BY seq LIMIT 1').pluck(),
    // Only live rows have an expiry: the index (expires_at, seq) alone answers.
    dueExpiries: db.prepare(
      `SELECT key, seq AS offset FROM state INDEXED BY state_expiry WHERE expires_at IS NOT NULL AND expires_at <= ?
       ORDER BY expires_at LIMIT ?`,
    ),
    // Only live rows have an expiry (a delete clears it): the partial index alone answers.
    expiredCount: db.prepare('SELECT count(*) FROM state WHERE expires_at IS NOT NULL AND expires_at <= ?').pluck(),
    liveTerms: db.prepare('SELECT key, seq AS offset FROM state WHERE live = 1'),
    saveDigest: db.prepare('UPDATE meta SET digest = ? WHERE id = 1'),
    // Rewrites the meta row unchanged: a commit of one page, as small as a write can be.
    probe: db.prepare('UPDATE meta SET last_ts = last_ts WHERE id = 1'),
    saveRemoval: db.prepare('UPDATE meta SET records = @records, state_keys = @stateKeys, horizon = @horizon WHERE id = 1'),
  };
}
