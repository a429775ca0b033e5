// SQL shared by the store's connections.
import type { Op, SnapshotShape, StoredRecord } from '../log-store.js';

/** The exclusive bound of keys with `prefix`: prefix + 0xFF (never in UTF-8) as TEXT, compared by memcmp on the index. */
export function prefixUpperBound(prefix: string): Buffer {
  return Buffer.concat([Buffer.from(prefix, 'utf8'), Buffer.from([0xff])]);
}

// Live keys from @from (inclusive) below @upper, except @exclude. One lower bound on purpose: given
// two, SQLite seeks by the first and filters by the second, so every page rescanned from the prefix.
const LIVE_KEYS = `
  FROM state s JOIN log l ON l.seq = s.seq
  WHERE s.key >= @from AND s.key < CAST(@upper AS TEXT) AND s.key IS NOT @exclude AND s.live = 1
    AND (s.expires_at IS NULL OR s.expires_at > @now)
  ORDER BY s.key LIMIT @limit`;

/** The state rows of a listing's range, whatever they hold, in key order. */
const LISTED_RANGE = 'FROM state WHERE key >= @from AND key < CAST(@upper AS TEXT) AND key IS NOT @exclude ORDER BY key';

const SCANNED_ROWS = `SELECT key, seq, live, expires_at ${LISTED_RANGE} LIMIT @scan`;

/** A listing page: the live keys, not yet expired by @now, among SCANNED_ROWS. */
export const LIST_PAGE_SQL = `
  SELECT s.key, l.value, s.seq AS offset, l.ts, s.expires_at AS expiresAt
  FROM (${SCANNED_ROWS}) s JOIN log l ON l.seq = s.seq
  WHERE s.live = 1 AND (s.expires_at IS NULL OR s.expires_at > @now)
  ORDER BY s.key LIMIT @limit`;

/** The last of SCANNED_ROWS' keys when there are @scan of them; no row when fewer are left. */
export const LIST_SCAN_END_SQL = `SELECT key ${LISTED_RANGE} LIMIT 1 OFFSET @scan - 1`;

// The keys as JSON text built by SQLite, exactly as render.ts's entryJson and recordJson build them:
// one string per key is the cheapest way out of the database (keys hold no lone surrogates).
const EXPIRY_JSON = `CASE WHEN s.expires_at IS NULL THEN '' ELSE ',"expiresAt":' || s.expires_at END`;
const JSON_OF: Record<SnapshotShape, string> = {
  entry: `'{"key":' || json_quote(s.key) || ',"value":' || l.value || ',"offset":' || s.seq || ',"ts":' || l.ts || ${EXPIRY_JSON} || '}'`,
  record: `'{"offset":' || s.seq || ',"key":' || json_quote(s.key) || ',"op":"set","value":' || l.value || ',"ts":' || l.ts || ${EXPIRY_JSON} || '}'`,
};

export const liveJsonSql = (shape: SnapshotShape): string => `SELECT ${JSON_OF[shape]} ${LIVE_KEYS}`;

// A page as one text, a line each, with its last key and counts: one row a page, as stepping a row
// out of better-sqlite3 costs more than building its line. A value over @cap bytes makes no line
// (the caller reads that page as rows); lines join in the LIMITed subquery's order (tests check it).
export const liveTextSql = (shape: SnapshotShape): string =>
  `SELECT group_concat(line, ''), max(k), count(*), count(line) FROM (
    SELECT s.key AS k, CASE WHEN octet_length(l.value) <= @cap THEN ${JSON_OF[shape]} || char(10) END AS line ${LIVE_KEYS})`;

// Parameters of the live-key queries, keys with `prefix` after `afterKey` not expired by `now`. A
// snapshot passes no `now`: expired values stay until their tombstones, so mirrors follow the log.
export function liveEntriesParams(prefix: string, afterKey: string | null, limit: number, now = 0) {
  // A cursor below the prefix (from another listing) must not widen the range.
  const resume = afterKey !== null && Buffer.compare(Buffer.from(afterKey), Buffer.from(prefix)) > 0;
  return { from: resume ? afterKey : prefix, exclude: afterKey, upper: prefixUpperBound(prefix), limit, now };
}

/** A record's expiry: the state row's while the record is its key's latest (a superseded one's no longer matters). */
const RECORD_EXPIRY = `(SELECT s.expires_at FROM state s WHERE s.key = l.key AND s.seq = l.seq AND l.op = 'set') AS expiresAt`;

/** Records in (@after, @until] with a prefix (@lower, @upper): a primary-key range, so a rare match examines few rows. */
export const RECORDS_AFTER_SQL = `
  SELECT l.seq AS offset, l.key, l.op, l.value, l.ts, ${RECORD_EXPIRY} FROM log l
  WHERE l.seq > @after AND l.seq <= @until AND l.key >= @lower AND l.key < CAST(@upper AS TEXT)
  ORDER BY l.seq LIMIT @limit`;

/** One key's records in (@after, @until], in offset order (the same range as RECORDS_AFTER_SQL). */
export const KEY_RECORDS_AFTER_SQL = `
  SELECT l.seq AS offset, l.key, l.op, l.value, l.ts, ${RECORD_EXPIRY} FROM log l
  WHERE l.seq > @after AND l.seq <= @until AND l.key = @key
  ORDER BY l.seq LIMIT @limit`;

/** Key @key's records among the @scan below @before, newest first; the scan reads offsets and keys, values only for matches. */
export const KEY_HISTORY_SQL = `
  SELECT l.seq AS offset, l.key, l.op, l.value, l.ts FROM (
    SELECT seq FROM (SELECT seq, key FROM log WHERE seq < @before ORDER BY seq DESC LIMIT @scan)
    WHERE key = @key ORDER BY seq DESC LIMIT @limit
  ) m JOIN log l ON l.seq = m.seq ORDER BY l.seq DESC`;

/** The lowest offset of a full scan of @scan records below @before; no row when fewer are left. */
export const HISTORY_SCAN_END_SQL = 'SELECT seq FROM log WHERE seq < @before ORDER BY seq DESC LIMIT 1 OFFSET @scan - 1';

/** RECORDS_AFTER_SQL's and KEY_HISTORY_SQL's columns in raw mode (arrays build faster than named rows). */
export const toRecord = (row: unknown[]): StoredRecord => {
  const record: StoredRecord = { offset: row[0] as number, key: row[1] as string, op: row[2] as Op, value: row[3] as string | null, ts: row[4] as number };
  // Only a set still its key's latest record with a TTL has one (RECORD_EXPIRY).
  if (row[5] != null) record.expiresAt = row[5] as number;
  return record;
};

/** Rows until the query ends or they hold `maxChars` (one at least): stepping stops before a page of large values is read. */
export function takePage<Raw, Row>(
  rows: IterableIterator<Raw>,
  toRow: (raw: Raw) => Row,
  chars: (row: Row) => number,
  maxChars = Infinity,
): { rows: Row[]; stoppedByChars: boolean } {
  const page: Row[] = [];
  let total = 0;
  for (const raw of rows) {
    const row = toRow(raw);
    page.push(row);
    total += chars(row);
    // Leaving the loop early resets the statement (the iterator's return()).
    if (total >= maxChars) return { rows: page, stoppedByChars: true };
  }
  return { rows: page, stoppedByChars: false };
}
