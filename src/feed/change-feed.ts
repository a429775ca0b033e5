// Changes as a reader at `after` sees them: a page and the `next` offset, or a 410 to start over;
// the long poll and the event stream share it, as they must agree exactly.
import { ApiError } from '../contract/errors.js';
import { inScope } from '../contract/key-scope.js';
import type { LogStore, StoredRecord } from '../store/log-store.js';
import type { ReadTurns } from './read-turns.js';

export interface FeedPage {
  records: StoredRecord[];
  /** Where the reader continues: a full page's last offset, else the last offset examined. */
  next: number;
  head: number;
}

// The most offsets one filtered read examines, or a rare match would read the whole log per request:
// brief on the event loop on SQLite, large enough that a reader catches up in few requests.
export const FEED_SCAN_RECORDS = 2000;

/** `key` is an exact key, exclusive with `prefix`; `within` (prefixes within `prefix`) keeps only their keys. */
export interface FeedQuery {
  after: number;
  prefix: string;
  key?: string | undefined;
  within?: readonly string[] | undefined;
  limit: number;
  maxChars: number;
}

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

/** A page, read in its turn among the process's feed reads; not read at all once `gone` is true. */
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
