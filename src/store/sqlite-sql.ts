// SQL shared by the store's connections.
import type Database from 'better-sqlite3';

/**
 * The exclusive upper bound of keys that start with `prefix`, in byte order: the
 * prefix followed by the byte 0xFF, which never occurs in UTF-8, cast to TEXT so
 * that SQLite compares it with memcmp and can still use the primary key index.
 */
export function prefixUpperBound(prefix: string): Buffer {
  return Buffer.concat([Buffer.from(prefix, 'utf8'), Buffer.from([0xff])]);
}

/** Live keys with a prefix (@lower, @upper) after @after, in byte order. */
export const LIVE_ENTRIES_SQL = `
  SELECT s.key, l.value, s.seq AS offset, l.ts FROM state s JOIN log l ON l.seq = s.seq
  WHERE s.key >= @lower AND s.key > @after AND s.key < CAST(@upper AS TEXT) AND s.live = 1
  ORDER BY s.key LIMIT @limit`;

/** Records after @after with a prefix (@lower, @upper), in offset order. */
export const RECORDS_AFTER_SQL = `
  SELECT seq AS offset, key, op, value, ts FROM log
  WHERE seq > @after AND key >= @lower AND key < CAST(@upper AS TEXT)
  ORDER BY seq LIMIT @limit`;

/**
 * Runs a paged query and keeps rows until it has `limit` of them or their keys and
 * values hold `maxChars` characters (at least one row). Stepping an iterator and
 * stopping early keeps a page of large values from being read whole.
 */
export function takePage<Row extends { key: string; value: string | null }>(
  statement: Database.Statement,
  params: Record<string, unknown>,
  maxChars = Infinity,
): { rows: Row[]; stoppedByChars: boolean } {
  const rows: Row[] = [];
  let chars = 0;
  for (const row of statement.iterate(params) as IterableIterator<Row>) {
    rows.push(row);
    chars += row.key.length + (row.value?.length ?? 0);
    // Leaving the loop early resets the statement (the iterator's return()).
    if (chars >= maxChars) return { rows, stoppedByChars: true };
  }
  return { rows, stoppedByChars: false };
}
