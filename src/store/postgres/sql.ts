// SQL of the PostgreSQL store and its clients' settings. Reads that return the head with their
// rows do it in ONE statement: under READ COMMITTED a statement sees one snapshot.
import pg from 'pg';

/** int8 (offsets, times, counters) as numbers: every value stays below 2^53. */
const INT8_OID = 20;
export const pgTypes = {
  getTypeParser: ((oid: number, format?: string) =>
    oid === INT8_OID ? (text: string) => Number(text) : pg.types.getTypeParser(oid, format as 'text')) as typeof pg.types.getTypeParser,
};

/**
 * A statement of the write path and of key reads, prepared once on each connection (named): its
 * round trips then carry only values, and PostgreSQL neither parses nor plans it again.
 */
const prepared =
  (name: string, text: string) =>
  (values: unknown[] = []): pg.QueryConfig => ({ name, text, values });

/** The channel every node LISTENs on; the payload is '<durable head> <node that made it durable>'. */
export const CHANGES_CHANNEL = 'statelog_changes';

/** The exclusive bound of keys with `prefix` (its last code point + 1; null: none): COLLATE "C" keeps code point order. */
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
  SELECT head, horizon FROM meta WHERE id = 1 FOR UPDATE;
  SELECT statelog_fence()`;

/** State rows of keys $1, live values of $2 (keys incremented), remembered answers of idempotency keys $3. */
const GROUP_READ_SQL = `
  SELECT 's' AS kind, s.key, s.seq, s.live, l.value AS text1, NULL::text AS text2, s.expires_at AS "expiresAt"
    FROM state s LEFT JOIN log l ON s.live AND s.key = ANY($2::text[]) AND l.seq = s.seq
    WHERE s.key = ANY($1::text[])
  UNION ALL
  SELECT 'i', key, NULL, NULL, fingerprint, answer, expires_at FROM idempotency WHERE key = ANY($3::text[])`;

export const GROUP_READ = prepared('statelog_group_read', GROUP_READ_SQL);

/** See migrations/postgres/003_ttl_digest.sql; no row back means a key it read had changed. */
export const APPEND_SQL = `
  SELECT out_base AS base FROM statelog_append($1::text[], $2::bigint[], $3::boolean[], $4::text[], $5::text[],
    $6::text[], $7::text[], $8::bigint[], $9::boolean[], $10::bigint[], $11::bigint, $12::bigint, $13::boolean, $14::bigint, $15::text)`;

export const APPEND = prepared('statelog_append', APPEND_SQL);

// The head, with a transaction that writes WAL (a logical message, which touches no table): its
// synchronous commit flushes, and waits for a synchronous standby, past every commit the head counts.
export const BARRIER = prepared('statelog_barrier', `SELECT head, pg_logical_emit_message(true, 'statelog', 'durable') AS lsn FROM meta WHERE id = 1`);
/** Tells every node of a durable head ('<head> <node>'); it writes no WAL, so its commit waits for nothing. */
export const NOTIFY = prepared('statelog_notify', `SELECT pg_notify('${CHANGES_CHANNEL}', $1)`);

/** Key $1's live value unless it expired by $2. */
export const GET = prepared(
  'statelog_get',
  `SELECT s.key, l.value, s.seq, l.ts, s.expires_at FROM state s JOIN log l ON l.seq = s.seq
  WHERE s.key = $1 AND s.live AND (s.expires_at IS NULL OR s.expires_at > $2)`,
);

/** Up to $2 keys expired by $1, soonest first, by the partial index; nodes may race: the conditional delete lets one win. */
export const DUE_EXPIRIES_SQL = `
  SELECT key, seq FROM state WHERE expires_at IS NOT NULL AND expires_at <= $1 ORDER BY expires_at LIMIT $2`;

// Rows of `rows` up to the one that brings keys and values to `maxBytes` (NULL: no bound), at least one:
// octet_length never fetches the values left out. `taken` tells a cut page from the last one.
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

// Live keys not expired by $6 among the first $7 state rows of the range (LIST_SCAN_SLACK), with
// the head, in one snapshot; `scan_end` is the last key examined when there were $7.
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

// A snapshot's next page, in its transaction. An expired value stays until the expirer's tombstone
// (which the feed carries, so that mirrors follow); each line carries its expiry.
export const SNAPSHOT_PAGE_SQL = `SELECT key, value, seq, ts, expires_at FROM (${SNAPSHOT_ROWS_SQL}) p ORDER BY key`;

// Records in ($1, $6], a primary-key range (a rare match examines at most $6 - $1 rows), with prefix
// [$2, $3) or key $7, at most $4 and about $5 bytes, with head and horizon; a live set carries its expiry.
export const CHANGES_SQL = `
  WITH m AS (SELECT head, horizon, epoch, lineage FROM meta WHERE id = 1)
  SELECT m.head, m.horizon, m.epoch, m.lineage, r.seq, r.key, r.op, r.value, r.ts, r.taken,
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

// Key $1's records among the $5 below $2, newest first, at most $3 and about $4 bytes, with the head
// and the lowest offset examined; values are fetched for the matches alone.
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

/** The counters, expired values counted apart as of $1 by the partial index (only live rows have an expiry). */
export const COUNTERS_SQL = `
  SELECT head, horizon, records, live_keys AS "liveKeys", state_keys AS "stateKeys", digest::text,
    (SELECT count(*) FROM state WHERE expires_at IS NOT NULL AND expires_at <= $1)::int AS "expiredKeys",
    pg_total_relation_size('log') + pg_total_relation_size('state')
      + pg_total_relation_size('idempotency') + pg_total_relation_size('meta') AS "dbBytes"
  FROM meta WHERE id = 1`;

/** What session $1 is doing: a commit waiting for a synchronous standby shows wait_event 'SyncRep'. */
export const SESSION_SQL = `SELECT state, wait_event FROM pg_stat_activity WHERE pid = $1`;

/** Forgets up to $2 expired answers; SKIP LOCKED, so it never waits for (or deadlocks with) a writer. */
export const PURGE_SQL = `
  WITH doomed AS (
    SELECT key FROM idempotency WHERE expires_at < $1 ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED
  )
  DELETE FROM idempotency i USING doomed WHERE i.key = doomed.key`;

// Readiness after a full disk: about a MiB of new log pages, rolled back; it fails with disk_full
// while the log cannot grow, and its dead rows are reused once vacuumed.
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
