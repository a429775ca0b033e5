// The store interface that the HTTP layer, the write batcher and the compactor use.
// SQL lives only in the implementations (sqlite-store.ts, later a PostgreSQL one).
// Values cross this boundary as JSON text, so reads can be streamed without
// parsing and re-serialising every value.

export type Op = 'set' | 'delete';

/** A live key as read from the current state. */
export interface StoredEntry {
  key: string;
  /** JSON text of the value. */
  value: string;
  offset: number;
  ts: number;
}

/** One record of the log. */
export interface StoredRecord {
  offset: number;
  key: string;
  op: Op;
  /** JSON text of the value; null for a delete marker. */
  value: string | null;
  ts: number;
}

export interface Condition {
  /** Only if the key's live record has this offset. */
  ifOffset?: number;
  /** Only if the key has no live value. */
  ifAbsent?: boolean;
  /** Only if the key has a live value. */
  ifLive?: boolean;
}

export type WriteOp =
  | ({ op: 'set'; key: string; value: string } & Condition)
  | ({ op: 'delete'; key: string } & Condition)
  | ({ op: 'incr'; key: string; by: number } & Condition);

export interface AppliedOp {
  key: string;
  offset: number;
  /** The new number, for incr only. */
  value?: number;
}

/** Why a write request was refused; `index` is the failing op's position. */
export type WriteFailure =
  | { code: 'precondition_failed'; index: number; currentOffset: number | null }
  | { code: 'not_found'; index: number }
  | { code: 'not_a_number'; index: number }
  | { code: 'idempotency_key_reused' };

export type WriteOutcome = { ok: true; applied: AppliedOp[] } | { ok: false; failure: WriteFailure };

/** An HTTP answer as remembered for an idempotency key. */
export interface Answer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

export interface WriteRequest {
  ops: WriteOp[];
  /** Present when the client sent an Idempotency-Key. */
  idempotency?: { key: string; fingerprint: string };
  /** Turns the outcome into the answer that is sent, and remembered with the idempotency key. */
  render(outcome: WriteOutcome): Answer;
}

export interface WriteResult {
  answer: Answer;
  /** True when the answer is a replay of an earlier request with the same idempotency key. */
  replayed: boolean;
  /** True when this request appended records (head moved). */
  wrote: boolean;
}

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
  liveKeys: number;
  /** Keys whose latest record is a delete marker still kept in the log. */
  tombstones: number;
  dbBytes: number;
}

export interface ListQuery {
  prefix: string;
  /** Exclusive: list keys after this one. */
  afterKey: string | null;
  limit: number;
}

export interface ChangesQuery {
  /** Exclusive: records with offset > after. */
  after: number;
  prefix: string;
  limit: number;
  /**
   * The page also stops once its keys and values hold this many characters (it always
   * holds at least one record), so large values cannot make a page unbounded.
   */
  maxChars?: number;
}

export interface ChangesPage {
  /** Surviving records after `after` matching the prefix, ascending, at most `limit`. */
  records: StoredRecord[];
  /** Head and horizon read in the same transaction as the records. */
  head: number;
  horizon: number;
  /** True when the page stopped at `limit` or `maxChars`: more records may follow. */
  full: boolean;
}

/**
 * How a snapshot renders each live key: 'entry' is {"key","value","offset","ts"} (as
 * render.ts's entryJson), 'record' is {"offset","key","op":"set","value","ts"} (as
 * recordJson).
 */
export type SnapshotShape = 'entry' | 'record';

/**
 * A point-in-time view of the live keys at `offset`, read page by page. Writers are not
 * blocked while it is open; close() releases it at once.
 */
export interface SnapshotReader {
  readonly offset: number;
  readonly epoch: string;
  /**
   * The next live keys in ascending byte order as JSON text, one string per key, at
   * most `max`, stopping early once they hold `maxChars` characters; an empty page
   * means the end. Rendered by the store, because a snapshot of millions of keys is
   * fastest as one string per key. Throws once closed, so a closed reader is never
   * mistaken for a finished one.
   */
  nextJson(shape: SnapshotShape, max: number, maxChars?: number): Promise<string[]>;
  close(): void;
}

export interface LogStore {
  /** The database's epoch: offsets are comparable only within one. */
  readonly epoch: string;
  position(): LogPosition;
  get(key: string): Promise<StoredEntry | null>;
  list(query: ListQuery): Promise<{ items: StoredEntry[]; head: number }>;
  /**
   * Applies the requests in order in one transaction; each request is all or nothing,
   * and a refused request never affects its neighbours. Answers come back in order.
   */
  commit(requests: WriteRequest[], now: number): Promise<WriteResult[]>;
  readChanges(query: ChangesQuery): Promise<ChangesPage>;
  openSnapshot(prefix: string): Promise<SnapshotReader>;
  counters(): Promise<StoreCounters>;
  /** Throws unless the database answers. */
  ping(): Promise<void>;
  /** Forgets idempotency keys that expired before `now`; returns how many. */
  purgeIdempotency(now: number): Promise<number>;
  /** Makes the database ready to be reopened quickly (checkpoint) and closes it. */
  close(): Promise<void>;
}
