// Reading changes as a reader at offset `after` sees them: one page of the log with the
// `next` offset to continue from, or a 410 when the reader must start over. Shared by
// the long poll and the event stream, which must agree exactly.
import { ApiError } from '../contract/errors.js';
import type { LogStore, StoredRecord } from '../store/log-store.js';

export interface FeedPage {
  records: StoredRecord[];
  /** Where the reader continues: the last record's offset when the page is full, else head. */
  next: number;
  head: number;
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

export async function readFeed(
  store: LogStore,
  query: { after: number; prefix: string; limit: number; maxChars: number },
): Promise<FeedPage> {
  const page = await store.readChanges(query);
  checkReader(query.after, page);
  const last = page.records[page.records.length - 1];
  return { records: page.records, next: page.full && last ? last.offset : page.head, head: page.head };
}
