// The data model that the API, the write path and the stores share: the entries and
// records a store keeps (values as JSON text), the write ops, and what a write's outcome
// is. The store returns outcomes; routes render them (render.ts).

export type Op = 'set' | 'delete';

/** A live key as read from the current state. */
export interface StoredEntry {
  key: string;
  /** JSON text of the value. */
  value: string;
  offset: number;
  ts: number;
  /** When the value expires (ms since the epoch); absent or null: never. */
  expiresAt?: number | null;
}

/** One record of the log. */
export interface StoredRecord {
  offset: number;
  key: string;
  op: Op;
  /** JSON text of the value; null for a delete marker. */
  value: string | null;
  ts: number;
  /** A set's expiry while it is its key's latest record (ms since the epoch); absent or null: none. */
  expiresAt?: number | null;
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
  /** `ttlMs`: the value expires that long after the commit (MAX_TTL_MS at most). */
  | ({ op: 'set'; key: string; value: string; ttlMs?: number } & Condition)
  /**
   * `expiry`: the expirer's delete of a value past its expiry; with `ifOffset` it holds
   * when that record is still the key's, expired or not (anyone else sees it as absent).
   */
  | ({ op: 'delete'; key: string; expiry?: boolean } & Condition)
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

/** An HTTP answer: status, headers and the body's JSON text. */
export interface Answer {
  status: number;
  headers: Record<string, string>;
  body: string;
}
