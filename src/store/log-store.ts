// The store interface that the HTTP layer, the write batcher and the compactor use.
// SQL lives only in the implementations (sqlite/ and postgres/).
// Values cross this boundary as JSON text, so reads can be streamed without
// parsing and re-serialising every value.

export type { Answer, AppliedOp, Condition, Op, StoredEntry, StoredRecord, WriteFailure, WriteOp, WriteOutcome } from '../contract/model.js';
import type { Answer, StoredEntry, StoredRecord, WriteOp, WriteOutcome } from '../contract/model.js';

export interface WriteRequest {
  ops: WriteOp[];
  /** Present when the client sent an Idempotency-Key: the outcome is remembered with it. */
  idempotency?: { key: string; fingerprint: string };
}

export type WriteResult =
  | {
      /** For a replay, the outcome remembered with the idempotency key. */
      outcome: WriteOutcome;
      /** True when this is a replay of an earlier request with the same idempotency key. */
      replayed: boolean;
      /** Records this request appended (one per op); 0 when it was refused or replayed. */
      appended: number;
    }
  /** A replay of an answer remembered rendered, as answers were before their outcomes were. */
  | { answer: Answer; replayed: true; appended: 0 };

export interface LogPosition {
  head: number;
  horizon: number;
  epoch: string;
}

export interface StoreCounters {
  head: number;
  horizon: number;
  /** Records in the log, superseded ones included. */
  records: number;
  /** Keys with a value live now: a value past its expiry is not counted, as GET answers 404 for it. */
  liveKeys: number;
  /** Keys whose value is past its expiry while its tombstone is not in the log yet. */
  expiredKeys: number;
  /** Keys whose latest record is a delete marker still kept in the log. */
  tombstones: number;
  dbBytes: number;
  /** The state digest at `head` (read with it), 16 hex digits: see src/contract/digest.ts. */
  digest: string;
}

/** The counters as the meta row keeps them, beside the keys past their expiry counted now. */
export interface CountedMeta {
  head: number;
  horizon: number;
  records: number;
  /** Keys whose latest record is a set, expired or not. */
  liveKeys: number;
  /** Rows in state: live keys and kept delete markers. */
  stateKeys: number;
  expiredKeys: number;
  dbBytes: number;
  digest: string;
}

/** StoreCounters from the meta row: a value past its expiry counts apart from the live ones. */
export function countersOf(meta: CountedMeta): StoreCounters {
  const { head, horizon, records, liveKeys, stateKeys, expiredKeys, dbBytes, digest } = meta;
  return { head, horizon, records, liveKeys: liveKeys - expiredKeys, expiredKeys, tombstones: stateKeys - liveKeys, dbBytes, digest };
}

/** A key whose value is past its expiry, and the offset of that value's record. */
export interface DueExpiry {
  key: string;
  offset: number;
}

/** Superseded records / all records: the share of the log that compaction would remove. */
export function dirtyRatio(counters: StoreCounters): number {
  const superseded = counters.records - counters.liveKeys - counters.expiredKeys - counters.tombstones;
  return counters.records === 0 ? 0 : superseded / counters.records;
}

export interface ListQuery {
  prefix: string;
  /** Exclusive: list keys after this one. */
  afterKey: string | null;
  limit: number;
  /**
   * Stop early once the keys and values read add up to this many characters (at least
   * one item is always returned), so that large values never make a huge page.
   */
  maxChars?: number;
}

export interface ListPage {
  items: StoredEntry[];
  head: number;
  /** True when maxChars stopped the page early and more keys follow. */
  truncated?: boolean;
  /**
   * Set when the page examined LIST_SCAN_SLACK state rows more than its limit before it
   * filled: the last key examined, after which the listing goes on.
   */
  scannedTo?: string;
}

/**
 * State rows a listing page may examine beyond its limit. Values past their expiry that
 * the expirer has not reached and kept delete markers are stepped over, never shown: a
 * page stops after this many of them and says where (ListPage.scannedTo), so no page
 * costs more than about this many rows whatever the backlog.
 */
export const LIST_SCAN_SLACK = 5000;

export interface ChangesQuery {
  /** Exclusive: records with offset > after. */
  after: number;
  prefix: string;
  /** Only this exact key's records (with `prefix` empty); undefined: no key filter. */
  key?: string;
  /**
   * A filtered read (`prefix` or `key`) examines only offsets up to `after + scan`, so
   * that a filter matching little never reads the whole log in one request.
   */
  scan?: number;
  limit: number;
  /**
   * The page also stops once its keys and values hold this many characters (it always
   * holds at least one record), so large values cannot make a page unbounded.
   */
  maxChars?: number;
}

/** The last offset a changes read may examine: bounded only when it filters. */
export function changesUntil(query: ChangesQuery): number {
  const filtered = query.prefix !== '' || query.key !== undefined;
  return filtered && query.scan !== undefined ? query.after + query.scan : Number.MAX_SAFE_INTEGER;
}

export interface ChangesPage {
  /** Surviving records after `after` matching the prefix, ascending, at most `limit`. */
  records: StoredRecord[];
  /** Head and horizon read in the same transaction as the records. */
  head: number;
  horizon: number;
  /** True when the page stopped at `limit` or `maxChars`: more records may follow. */
  full: boolean;
  /** When not full: every offset up to here (at most head) was examined. */
  examined: number;
}

/**
 * A history page examines at most this many log records (newest first): the log keeps
 * no index by key (it would cost every write; docs/key-history.md), so the work a page
 * does is bounded by records examined, as a filtered changes page is.
 */
export const HISTORY_SCAN_RECORDS = 10_000;

export interface HistoryQuery {
  key: string;
  /** Exclusive: records with offset < before; null for no bound. */
  before: number | null;
  limit: number;
  /** The page also stops once its keys and values hold this many characters (at least one record). */
  maxChars?: number;
}

export interface HistoryPage {
  /** The key's records still in the log below `before`, newest first, at most `limit`. */
  records: StoredRecord[];
  /** The head read in the same transaction as the records. */
  head: number;
  /** True when the page stopped at `limit` or `maxChars`: older records may follow. */
  full: boolean;
  /**
   * The lowest offset examined when the page stopped at HISTORY_SCAN_RECORDS with older
   * records left unexamined; null when it examined the log down to its oldest record.
   */
  examinedTo: number | null;
}

/**
 * How a snapshot renders each live key: 'entry' is {"key","value","offset","ts"} (as
 * render.ts's entryJson), 'record' is {"offset","key","op":"set","value","ts"} (as
 * recordJson).
 */
export type SnapshotShape = 'entry' | 'record';

/**
 * A point-in-time view of the live keys at `offset`, read page by page. Writers are not
 * blocked while it is open; close() releases it (on SQLite, its worker thread a message
 * later).
 */
export interface SnapshotReader {
  readonly offset: number;
  readonly epoch: string;
  /** The digest of the whole state at `offset` (whatever the prefix). */
  readonly digest: bigint;
  /**
   * The next live keys in ascending byte order as JSON text, one string per key, at
   * most `max`, stopping early once they hold `maxChars` characters; an empty page
   * means the end. Rendered by the store, because a snapshot of millions of keys is
   * fastest as one string per key. Throws once closed, so a closed reader is never
   * mistaken for a finished one.
   */
  nextJson(shape: SnapshotShape, max: number, maxChars?: number): Promise<string[]>;
  /**
   * Optional, for a store that renders on another thread: the next live keys' lines as
   * UTF-8, each ended by a newline, and how many; a count of 0 means the end. The text is
   * the caller's until its next call. Not to be mixed with nextJson on one reader.
   */
  nextChunk?(shape: SnapshotShape): Promise<SnapshotText>;
  close(): void;
}

export interface SnapshotText {
  text: Uint8Array;
  count: number;
}

/** What a compaction run may remove; fixed when the run starts. */
export interface CompactionPolicy {
  /** The run's clock reading: every age is measured from it. */
  now: number;
  /**
   * A record younger than this is never removed, and a record is removed as superseded
   * only when a later record of its key is at least this old (as Kafka's cleaner does),
   * so after a run each key keeps exactly one record older than the lag.
   */
  minLagMs: number;
  /** A delete marker that is its key's latest record is kept at least this long. */
  tombstoneRetentionMs: number;
}

/** Bounds of one compaction step (one transaction): whichever is reached first. */
export interface CompactionBudget {
  maxRows: number;
  maxMs: number;
}

/**
 * A compaction run, advanced one bounded step at a time; the caller yields to the
 * event loop between steps so that writes interleave. Every step commits on its own
 * and leaves the log and its counters consistent, so a run may stop after any step.
 */
export interface CompactionPass {
  /** Runs the next step; resolves false once the run has nothing left to do. */
  step(): Promise<boolean>;
  /** Lets go of what the run holds; called when it ends, early or not. */
  close(): void;
  /** Records removed so far, delete markers included. */
  readonly removed: number;
  /** Delete markers removed while they were their key's latest record (keys that left the state). */
  readonly tombstonesRemoved: number;
}

/** What the compactor's timer decides on, read from counters, never by scanning. */
export interface CompactionBacklog {
  records: number;
  /** Records that a later record of the same key superseded. */
  superseded: number;
  /**
   * A lower bound of the commit time of the earliest write that superseded a record
   * still in the log; null when no superseded record is left.
   */
  supersededSince: number | null;
}

export interface LogStore {
  /** The database's epoch: offsets are comparable only within one. */
  readonly epoch: string;
  /**
   * True when commit() has applied its transaction by the time it returns, its promise
   * then waiting only for durability (SQLite: the fsync on the thread pool). The next
   * group may then commit while this one waits, and one fsync serves both.
   */
  readonly appliesBeforeReturning: boolean;
  /**
   * Groups planned from an unlocked read and planned again under the lock because a key
   * they read changed meanwhile (a metric); absent for a store that plans under its lock.
   */
  readonly planConflicts?: number;
  /**
   * Head, horizon and epoch without a round trip. When several processes share the
   * database (PostgreSQL), the latest this process has learnt: it may lag another
   * node's commit by the time a notification takes, so answers that must be exact read
   * the head with their rows (readChanges, list).
   */
  position(): LogPosition;
  /**
   * Head, horizon and epoch read from the database now (on PostgreSQL, one round trip;
   * what is read is also learnt, so position() follows). For checks that must not act
   * on a head that lags another node's commit, such as refusing an offset as ahead.
   */
  readPosition(): Promise<LogPosition>;
  /**
   * Calls `onHead` with the new head when another process sharing the database commits,
   * and `onError` when watching is interrupted (it resumes by itself). Returns a function
   * that stops the calls. A store whose process is the only writer never calls them.
   */
  watchHead(onHead: (head: number) => void, onError?: (err: Error) => void): () => void;
  get(key: string): Promise<StoredEntry | null>;
  list(query: ListQuery): Promise<ListPage>;
  /**
   * Applies the requests in order in one transaction; each request is all or nothing,
   * and a refused request never affects its neighbours. Answers come back in order.
   */
  commit(requests: WriteRequest[], now: number): Promise<WriteResult[]>;
  readChanges(query: ChangesQuery): Promise<ChangesPage>;
  /** A key's records that compaction has not removed yet, newest first, within a bounded scan. */
  history(query: HistoryQuery): Promise<HistoryPage>;
  openSnapshot(prefix: string): Promise<SnapshotReader>;
  counters(): Promise<StoreCounters>;
  /** Throws unless the database answers. */
  ping(): Promise<void>;
  compactionBacklog(): Promise<CompactionBacklog>;
  /** Plans a compaction run; nothing is removed until its first step. */
  startCompaction(policy: CompactionPolicy, budget: CompactionBudget): Promise<CompactionPass>;
  /** Forgets idempotency keys that expired before `now`; returns how many. */
  purgeIdempotency(now: number): Promise<number>;
  /** Up to `limit` keys whose live value expired by `now`, soonest first. */
  dueExpiries(now: number, limit: number): Promise<DueExpiry[]>;
  /** Makes the database ready to be reopened quickly (checkpoint) and closes it. */
  close(): Promise<void>;
}
