// Reading changes as a reader at offset `after` sees them: one page of the log with the
// `next` offset to continue from, or a 410 when the reader must start over. Shared by
// the long poll and the event stream, which must agree exactly.
import { ApiError } from '../contract/errors.js';
import { inScope } from '../contract/key-scope.js';
import type { LogStore, StoredRecord } from '../store/log-store.js';
import type { ReadTurns } from './read-turns.js';

export interface FeedPage {
  records: StoredRecord[];
  /**
   * Where the reader continues: the last record's offset when the page is full, else the
   * last offset examined: the head, or below it when a filtered read reached its scan bound.
   */
  next: number;
  head: number;
}

/**
 * The most log offsets one filtered read examines (a `prefix` or `key` that matches
 * little would otherwise read the whole log per request). Small enough that a read
 * holds the event loop only briefly on SQLite, large enough that a reader catches up
 * with few requests.
 */
export const FEED_SCAN_RECORDS = 2000;

/**
 * What one read of the feed asks for: `key` is an exact key, exclusive with `prefix`;
 * `within`, prefixes that each start with `prefix`, keeps only their keys.
 */
export interface FeedQuery {
  after: number;
  prefix: string;
  key?: string | undefined;
  within?: readonly string[] | undefined;
  limit: number;
  maxChars: number;
}

/** 410 epoch_changed when the reader's offsets belong to another database. */
export function checkEpoch(given: string | undefined, epoch: string): void {
  if (given !== undefined && given !== epoch) {
    throw new ApiError('epoch_changed', 'the log was recreated or restored: offsets from another epoch mean nothing here; take a new snapshot', { epoch });
  }
}

/** 410 when a reader at `after` cannot continue from there. */
export function checkReader(after: number, position: { head: number; horizon: number }): void {
  if (after > position.head) {
    throw new ApiError('offset_ahead', `offset ${after} is beyond the head ${position.head}`, { head: position.head });
  }
  if (after < position.horizon) {
    const message = `deletes after offset ${after} may have been compacted away (horizon ${position.horizon}); take a new snapshot`;
    throw new ApiError('offset_compacted', message, { horizon: position.horizon });
  }
}

/**
 * A page of the feed, read in its turn among the process's feed reads (`turns`, one for
 * the process: services.ts); not read at all once `gone` is true.
 */
export async function readFeed(turns: ReadTurns, store: LogStore, query: FeedQuery, gone?: () => boolean): Promise<FeedPage> {
  const { key, within, ...rest } = query;
  const changes = { ...rest, ...(key !== undefined ? { key } : {}), scan: FEED_SCAN_RECORDS };
  const page = await turns.run(() => store.readChanges(changes), gone);
  checkReader(query.after, page);
  const last = page.records[page.records.length - 1];
  // The reader moves past the records it is not shown, as past those of other prefixes.
  const records = within ? page.records.filter((record) => inScope(record.key, within)) : page.records;
  return { records, next: page.full && last ? last.offset : page.examined, head: page.head };
}
