// Changes as a reader at `after` sees them: a page and the `next` offset, or a 410 to start over;
// the long poll and the event stream share it, as they must agree exactly.
import { ApiError } from '../contract/errors.js';
import { inScope } from '../contract/key-scope.js';
import { servedGeneration, divergedFrom, firstGeneration, type GenerationToken } from '../contract/lineage.js';
import type { LogStore, StoredRecord } from '../store/log-store.js';
import type { ReadTurns } from './read-turns.js';

export interface FeedPage {
  records: StoredRecord[];
  /** Where the reader continues: a full page's last offset, else the last offset examined. */
  next: number;
  head: number;
  /** The generation the page was read under (`gen` in the Link), where the log has a lineage. */
  gen?: string;
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
  /** The generation the reader was served under: checked against the lineage. */
  gen?: GenerationToken | undefined;
}

export function checkEpoch(given: string | undefined, epoch: string): void {
  if (given !== undefined && given !== epoch) {
    throw new ApiError('epoch_changed', 'the log was recreated or restored: offsets from another epoch mean nothing here; take a new snapshot', { epoch });
  }
}

/** 410 when a reader at `after` (served under `gen`) cannot continue from there. */
export function checkReader(after: number, position: { head: number; horizon: number; lineage?: string | undefined }, gen?: GenerationToken): void {
  const lineage = position.lineage;
  // A reader naming no generation is of the first; past the head it is only ahead (offset_ahead below).
  const diverged = lineage === undefined ? null : gen ? divergedFrom(after, gen, lineage, position.head) : divergedFrom(Math.min(after, position.head), firstGeneration(lineage), lineage, position.head);
  if (diverged !== null) {
    const message = `the log no longer has records this reader was served (a failover lost them): its copy differs from offset ${diverged}; take a new snapshot`;
    throw new ApiError('log_diverged', message, { offset: diverged });
  }
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
  const { key, within, gen, ...rest } = query;
  const changes = { ...rest, ...(key !== undefined ? { key } : {}), scan: FEED_SCAN_RECORDS };
  const page = await turns.run(() => store.readChanges(changes), gone);
  checkReader(query.after, page, gen);
  const last = page.records[page.records.length - 1];
  // The reader moves past the records it is not shown, as past those of other prefixes.
  const records = within ? page.records.filter((record) => inScope(record.key, within)) : page.records;
  const next = page.full && last ? last.offset : page.examined;
  const shown = page.lineage === undefined ? undefined : servedGeneration(page.lineage, next);
  return shown === undefined ? { records, next, head: page.head } : { records, next, head: page.head, gen: shown };
}
