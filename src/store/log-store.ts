// The store interface; SQL lives only in sqlite/ and postgres/. Values cross it as JSON
// text, so that reads stream without parsing and re-serialising every value.

export type { Answer, AppliedOp, Condition, Op, StoredEntry, StoredRecord, WriteFailure, WriteOp, WriteOutcome } from '../contract/model.js';
import type { Answer, StoredEntry, StoredRecord, WriteOp, WriteOutcome } from '../contract/model.js';
import type { ConsumerStore } from './consumer-rules.js';

export interface WriteRequest {
  ops: WriteOp[];
  idempotency?: { key: string; fingerprint: string };
}

export type WriteResult =
  | {
      outcome: WriteOutcome;
      replayed: boolean;
      /** One per op; 0 when refused or replayed. */
      appended: number;
    }
  /** A replay of an answer that an older version remembered rendered. */
  | { answer: Answer; replayed: true; appended: 0 };

export interface LogPosition {
  head: number;
  horizon: number;
  epoch: string;
  /** The generations of the log's history (contract/lineage.ts); absent where history never forks (SQLite). */
  lineage?: string;
}

export interface StoreCounters {
  head: number;
  horizon: number;
  records: number;
  /** A value past its expiry is not counted, as GET answers 404 for it. */
  liveKeys: number;
  /** Keys whose value is past its expiry while its tombstone is not in the log yet. */
  expiredKeys: number;
  tombstones: number;
  dbBytes: number;
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

export function countersOf(meta: CountedMeta): StoreCounters {
  const { head, horizon, records, liveKeys, stateKeys, expiredKeys, dbBytes, digest } = meta;
  return { head, horizon, records, liveKeys: liveKeys - expiredKeys, expiredKeys, tombstones: stateKeys - liveKeys, dbBytes, digest };
}

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
  /** Stops early once keys and values reach this many characters (one item at least): no huge page. */
  maxChars?: number;
}

export interface ListPage {
  items: StoredEntry[];
  head: number;
  /** True when maxChars stopped the page early and more keys follow. */
  truncated?: boolean;
  /** Set when LIST_SCAN_SLACK rows beyond the limit did not fill the page: the last key examined. */
  scannedTo?: string;
}

/** Rows a listing page may step over (expired values, kept delete markers): no backlog makes a page costly. */
export const LIST_SCAN_SLACK = 5000;

export interface ChangesQuery {
  /** Exclusive: records with offset > after. */
  after: number;
  prefix: string;
  /** Only this key's records (with `prefix` empty). */
  key?: string;
  /** A filtered read examines offsets up to `after + scan` only: a rare match never reads the whole log. */
  scan?: number;
  limit: number;
  /** As ListQuery.maxChars. */
  maxChars?: number;
}

/** The last offset a changes read may examine: bounded only when it filters. */
export function changesUntil(query: ChangesQuery): number {
  const filtered = query.prefix !== '' || query.key !== undefined;
  return filtered && query.scan !== undefined ? query.after + query.scan : Number.MAX_SAFE_INTEGER;
}

export interface ChangesPage {
  records: StoredRecord[];
  /** Head and horizon read in the same transaction as the records. */
  head: number;
  horizon: number;
  /** True when the page stopped at `limit` or `maxChars`: more records may follow. */
  full: boolean;
  /** When not full: every offset up to here was examined. */
  examined: number;
  /** The lineage read with the records, where the store has one. */
  lineage?: string;
}

/** Records a history page examines at most: the log has no index by key, which would cost every write. */
export const HISTORY_SCAN_RECORDS = 10_000;

export interface HistoryQuery {
  key: string;
  /** Exclusive: records with offset < before; null for no bound. */
  before: number | null;
  limit: number;
  maxChars?: number;
}

export interface HistoryPage {
  records: StoredRecord[];
  /** The head read in the same transaction as the records. */
  head: number;
  full: boolean;
  /** The lowest offset examined when HISTORY_SCAN_RECORDS stopped the page; null: read to the start. */
  examinedTo: number | null;
}

/** 'entry' and 'record' render as contract/render.ts's entryJson and recordJson. */
export type SnapshotShape = 'entry' | 'record';

/** The live keys at `offset`, read page by page; writers are not blocked while it is open. */
export interface SnapshotReader {
  readonly offset: number;
  readonly epoch: string;
  /** The lineage read with the state, where the store has one. */
  readonly lineage?: string | undefined;
  /** The digest of the whole state at `offset` (whatever the prefix). */
  readonly digest: bigint;
  /** The next live keys in byte order, one JSON text each, [] at the end; throws once closed, never looking finished. */
  nextJson(shape: SnapshotShape, max: number, maxChars?: number): Promise<string[]>;
  /** For a store that renders on another thread: newline-ended UTF-8 lines, the caller's until its next call. */
  nextChunk?(shape: SnapshotShape): Promise<SnapshotText>;
  close(): void;
}

export interface SnapshotText {
  text: Uint8Array;
  count: number;
}

/** What a compaction run may remove; fixed when the run starts. */
export interface CompactionPolicy {
  now: number;
  /** Younger records are never removed, nor removed as superseded by a younger one (as Kafka's cleaner). */
  minLagMs: number;
  /** A delete marker that is its key's latest record is kept at least this long. */
  tombstoneRetentionMs: number;
  /** Delete markers above this offset are kept whatever their age: a consumer holds them (null: none). */
  keepTombstonesAbove?: number | null;
}

/** Bounds of one compaction step (one transaction): whichever is reached first. */
export interface CompactionBudget {
  maxRows: number;
  maxMs: number;
}

/** A run in bounded steps, each committed on its own: writes interleave, and a run may stop after any step. */
export interface CompactionPass {
  /** Runs the next step; resolves false once the run has nothing left to do. */
  step(): Promise<boolean>;
  close(): void;
  readonly removed: number;
  /** Delete markers removed while they were their key's latest record (keys that left the state). */
  readonly tombstonesRemoved: number;
}

/** What the compactor's timer decides on, read from counters, never by scanning. */
export interface CompactionBacklog {
  records: number;
  superseded: number;
  /** At most the commit time of the earliest write that superseded a record still in the log. */
  supersededSince: number | null;
}

/** Whether a write could commit now, and if not why (`reason` is /readyz's). */
export type StoreReadiness = { ready: true } | { ready: false; reason: string; message: string };

export interface LogStore {
  /** The database's epoch: offsets are comparable only within one. */
  readonly epoch: string;
  /** commit() has applied its transaction when it returns, waiting only for durability: the next group shares the fsync. */
  readonly appliesBeforeReturning: boolean;
  /** Planned appends refused because a key they read changed meanwhile, each planned again (a metric). */
  readonly planConflicts?: number;
  /** Without a round trip: with several nodes it may lag another's commit, so exact answers read the head with their rows. */
  position(): LogPosition;
  /** Read from the database now (position() follows), for checks that must not lag another node's commit. */
  readPosition(): Promise<LogPosition>;
  /** Tells of other processes' commits (a sole writer never does); returns what stops it. */
  watchHead(onHead: (head: number) => void, onError?: (err: Error) => void): () => void;
  /**
   * Tells when what the node knows of the log may be wrong (its connections to the database broke,
   * or the log's history forked): copies kept in memory are dropped. Stores of one history never do.
   */
  watchRewind?(onRewind: (position: LogPosition) => void): () => void;
  get(key: string): Promise<StoredEntry | null>;
  list(query: ListQuery): Promise<ListPage>;
  /**
   * In order, in one transaction: each request all or nothing, a refused one never affecting its
   * neighbours; resolves once durable. `onApplied` is called once the transaction is applied (the
   * next group may commit after it) and before it is durable, by a store that applies after returning.
   */
  commit(requests: WriteRequest[], now: number, onApplied?: () => void): Promise<WriteResult[]>;
  readChanges(query: ChangesQuery): Promise<ChangesPage>;
  /** A key's records that compaction has not removed yet, newest first, within a bounded scan. */
  history(query: HistoryQuery): Promise<HistoryPage>;
  openSnapshot(prefix: string): Promise<SnapshotReader>;
  counters(): Promise<StoreCounters>;
  ping(): Promise<void>;
  /** Where the database is remote: what the store last found, at once (no round trip); else readiness pings. */
  readiness?(): StoreReadiness;
  compactionBacklog(): Promise<CompactionBacklog>;
  /** Plans a compaction run; nothing is removed until its first step. */
  startCompaction(policy: CompactionPolicy, budget: CompactionBudget): Promise<CompactionPass>;
  purgeIdempotency(now: number): Promise<number>;
  /** Up to `limit` keys whose live value expired by `now`, soonest first. */
  dueExpiries(now: number, limit: number): Promise<DueExpiry[]>;
  /** Named positions kept for groups of workers (consumer-rules.ts). */
  readonly consumers: ConsumerStore;
  /** Checkpoints, so the database reopens quickly, and closes it. */
  close(): Promise<void>;
}
