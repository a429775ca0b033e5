// SQL of the PostgreSQL store, and the connection settings every one of its clients uses.
// Reads that return the head with their rows do so in ONE statement: under READ
// COMMITTED a statement sees one snapshot, so the head matches the rows exactly.
import pg from 'pg';

/** int8 (offsets, times, counters) as numbers: every value stays below 2^53. */
const INT8_OID = 20;
export const pgTypes = {
  getTypeParser: ((oid: number, format?: string) =>
    oid === INT8_OID ? (text: string) => Number(text) : pg.types.getTypeParser(oid, format as 'text')) as typeof pg.types.getTypeParser,
};

/** The channel every node LISTENs on; the payload is '<new head> <committing node's id>'. */
export const CHANGES_CHANNEL = 'statelog_changes';

/**
 * The exclusive upper bound of keys that start with `prefix`, in byte order, or null when
 * there is none: the prefix with its last code point raised by one. UTF-8 preserves code
 * point order, and COLLATE "C" compares bytes.
 */
export function prefixUpperBound(prefix: string): string | null {
  const points = [...prefix].map((c) => c.codePointAt(0)!);
  while (points.length > 0) {
    const last = points.pop()!;
    if (last < 0x10ffff) {
      // Surrogate code points cannot be stored: the next one after U+D7FF is U+E000.
      points.push(last === 0xd7ff ? 0xe000 : last + 1);
      return String.fromCodePoint(...points);
    }
  }
  return null;
}

/** Locks the counters row (every writer's first step) and reads it. A simple query: no parameters. */
export const BEGIN_AND_LOCK_SQL = `BEGIN;
  SELECT head, horizon FROM meta WHERE id = 1 FOR UPDATE`;

/**
 * The state rows of keys $1, with the live value of those in $2 (keys the group
 * increments), and the remembered answers of idempotency keys $3.
 */
export const GROUP_READ_SQL = `
  SELECT 's' AS kind, s.key, s.seq, s.live, l.value AS text1, NULL::text AS text2, s.expires_at AS "expiresAt"
    FROM state s LEFT JOIN log l ON s.live AND s.key = ANY($2::text[]) AND l.seq = s.seq
    WHERE s.key = ANY($1::text[])
  UNION ALL
  SELECT 'i', key, NULL, NULL, fingerprint, answer, expires_at FROM idempotency WHERE key = ANY($3::text[])`;

/** See migrations/postgres/003_ttl_digest.sql; no row back means a key it read had changed. */
export const APPEND_SQL = `
  SELECT out_base AS base FROM statelog_append($1::text[], $2::bigint[], $3::boolean[], $4::text[], $5::text[],
    $6::text[], $7::text[], $8::bigint[], $9::boolean[], $10::bigint[], $11::bigint, $12::bigint, $13::boolean, $14::bigint, $15::text)`;

/** Key $1's live value unless it expired by $2. */
export const GET_SQL = `
  SELECT s.key, l.value, s.seq, l.ts, s.expires_at FROM state s JOIN log l ON l.seq = s.seq
  WHERE s.key = $1 AND s.live AND (s.expires_at IS NULL OR s.expires_at > $2)`;

/**
 * Up to $2 keys whose value expired by $1, soonest first, by the partial index alone (only
 * live rows have an expiry). Every node may read the same ones: its delete is
 * conditional on the offset, so one wins.
 */
export const DUE_EXPIRIES_SQL = `
  SELECT key, seq FROM state WHERE expires_at IS NOT NULL AND expires_at <= $1 ORDER BY expires_at LIMIT $2`;

/**
 * The rows of `rows` (a query with key and value columns, in `order`) up to the one whose
 * key and value bring their size to `maxBytes` bytes (a parameter; NULL: no bound), at
 * least one. octet_length reads a stored value's size without fetching it, so the values
 * of the rows left out are never read, and large values cannot make a page unbounded.
 * `taken` counts the rows before that cut, so that a cut page is told from the last one.
 */
const sizeBounded = (rows: string, order: string, maxBytes: string): string => `
  SELECT * FROM (
    SELECT r.*, count(*) OVER () AS taken,
      sum(octet_length(r.key) + coalesce(octet_length(r.value), 0)) OVER (ORDER BY r.${order} ROWS UNBOUNDED PRECEDING)
        - (octet_length(r.key) + coalesce(octet_length(r.value), 0)) AS before
    FROM (${rows}) r
  ) c WHERE ${maxBytes}::bigint IS NULL OR c.before < ${maxBytes}`;

/** Live keys with prefix range [$1, $3) after $2, at most $4 and, with $5, about $5 bytes. */
const SNAPSHOT_ROWS_SQL = sizeBounded(
  `SELECT s.key, l.value, s.seq, l.ts, s.expires_at FROM state s JOIN log l ON l.seq = s.seq
    WHERE s.live AND s.key >= $1 AND s.key > $2 AND ($3::text IS NULL OR s.key < $3)
    ORDER BY s.key LIMIT $4`,
  'key',
  '$5',
);

/**
 * A page of live keys not expired by $6 (SNAPSHOT_ROWS_SQL's other parameters) among the
 * first $7 state rows of the range, whatever they hold (see LIST_SCAN_SLACK), and the
 * head, in one snapshot; `scan_end` is the last of those rows' keys when there were $7.
 */
export const LIST_SQL = `
  WITH m AS (SELECT head FROM meta WHERE id = 1),
  scanned AS (
    SELECT key, seq, live, expires_at FROM state
    WHERE key >= $1 AND key > $2 AND ($3::text IS NULL OR key < $3) ORDER BY key LIMIT $7
  )
  SELECT m.head, (SELECT max(key) FROM scanned HAVING count(*) = $7) AS scan_end,
    e.key, e.value, e.seq, e.ts, e.expires_at, e.taken FROM m LEFT JOIN LATERAL (${sizeBounded(
    `SELECT s.key, l.value, s.seq, l.ts, s.expires_at FROM scanned s JOIN log l ON l.seq = s.seq
      WHERE s.live AND (s.expires_at IS NULL OR s.expires_at > $6) ORDER BY s.key LIMIT $4`,
    'key',
    '$5',
  )}
  ) e ON true ORDER BY e.key`;

/**
 * A snapshot's next page, read inside its transaction. A snapshot is the log's state at
 * its offset: a value past its expiry is in it until the expirer's tombstone, which
 * the change feed then carries, so a mirror's state and digest follow the log; each
 * line carries its expiry, so its reader drops it at that time as GET does.
 */
export const SNAPSHOT_PAGE_SQL = `SELECT key, value, seq, ts, expires_at FROM (${SNAPSHOT_ROWS_SQL}) p ORDER BY key`;

/**
 * Records in ($1, $6] with prefix range [$2, $3) and, with $7, exactly key $7, at most $4
 * and, with $5, about $5 bytes (see sizeBounded), with head and horizon, in one snapshot.
 * ($1, $6] is a range of the primary key: a filter that matches little examines at most
 * $6 - $1 rows. A set still its key's latest record carries the state row's expiry.
 */
export const CHANGES_SQL = `
  WITH m AS (SELECT head, horizon FROM meta WHERE id = 1)
  SELECT m.head, m.horizon, r.seq, r.key, r.op, r.value, r.ts, r.taken,
    (SELECT s.expires_at FROM state s WHERE s.key = r.key AND s.seq = r.seq AND r.op = 'set') AS "expiresAt"
  FROM m LEFT JOIN LATERAL (${sizeBounded(
    `SELECT seq, key, op, value, ts FROM log
      WHERE seq > $1 AND seq <= $6 AND key >= $2 AND ($3::text IS NULL OR key < $3)
        AND ($7::text IS NULL OR key = $7)
      ORDER BY seq LIMIT $4`,
    'seq',
    '$5',
  )}
  ) r ON true ORDER BY r.seq`;

/**
 * Key $1's records among the $5 records below $2, newest first, at most $3 and, with $4,
 * about $4 bytes (see sizeBounded), with the head and, when the scan examined all $5,
 * the lowest offset it examined, in one snapshot. The scan reads offsets and keys by
 * the primary key; values are fetched for the matches alone.
 */
export const KEY_HISTORY_SQL = `
  WITH m AS (SELECT head FROM meta WHERE id = 1),
  scan AS (SELECT seq, key FROM log WHERE seq < $2 ORDER BY seq DESC LIMIT $5),
  bound AS (SELECT CASE WHEN count(*) = $5 THEN min(seq) END AS examined_to FROM scan)
  SELECT m.head, b.examined_to, r.seq, r.key, r.op, r.value, r.ts, r.taken FROM m CROSS JOIN bound b
  LEFT JOIN LATERAL (${sizeBounded(
    `SELECT l.seq, l.key, l.op, l.value, l.ts FROM scan s JOIN log l ON l.seq = s.seq
      WHERE s.key = $1 ORDER BY l.seq DESC LIMIT $3`,
    'seq DESC',
    '$4',
  )}
  ) r ON true ORDER BY r.seq DESC`;

/**
 * The counters, with $1 the time at which expired values are counted apart, by the
 * partial index alone: only live rows have an expiry (a delete clears it).
 */
export const COUNTERS_SQL = `
  SELECT head, horizon, records, live_keys AS "liveKeys", state_keys AS "stateKeys", digest::text,
    (SELECT count(*) FROM state WHERE expires_at IS NOT NULL AND expires_at <= $1)::int AS "expiredKeys",
    pg_total_relation_size('log') + pg_total_relation_size('state')
      + pg_total_relation_size('idempotency') + pg_total_relation_size('meta') AS "dbBytes"
  FROM meta WHERE id = 1`;

/**
 * Forgets up to $2 expired answers. SKIP LOCKED: the purge never waits for a writer, so
 * it can never deadlock with one that holds the counters and upserts answers.
 */
export const PURGE_SQL = `
  WITH doomed AS (
    SELECT key FROM idempotency WHERE expires_at < $1 ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED
  )
  DELETE FROM idempotency i USING doomed WHERE i.key = doomed.key`;

/**
 * Readiness after a write found no room: rows that fill about a mebibyte of new log
 * pages, below the size at which PostgreSQL would compress them, in a transaction
 * that is then rolled back. It fails with disk_full (53100) while the log's files
 * cannot grow; the pages it added hold only dead rows, which vacuum gives to later writes.
 */
export const PROBE_ROWS = 512;
export const PROBE_SQL = `
  INSERT INTO log (seq, key, op, value, ts)
  SELECT -n, '', 'set', repeat('0', 1900), 0 FROM generate_series(1, $1::int) n`;

/** Builds a statement's parameter list as it is written: each call returns `$n`. */
export class Params {
  readonly values: unknown[] = [];

  add(value: unknown, cast = ''): string {
    this.values.push(value);
    return `$${this.values.length}${cast}`;
  }
}
