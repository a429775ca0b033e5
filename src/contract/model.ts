// The data model shared by the API, the write path and the stores: values as JSON text; the store
// returns outcomes and routes render them (render.ts).

export type Op = 'set' | 'delete';

export interface StoredEntry {
  key: string;
  value: string;
  offset: number;
  ts: number;
  /** When the value expires (ms since the epoch); absent or null: never. */
  expiresAt?: number | null;
}

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
  /** The expirer's delete: with `ifOffset` it holds while that record is the key's, expired or not. */
  | ({ op: 'delete'; key: string; expiry?: boolean } & Condition)
  /** `min`, `max`: the result must stay within them (inclusive), else the request is refused. */
  | ({ op: 'incr'; key: string; by: number; min?: number; max?: number } & Condition);

export interface AppliedOp {
  key: string;
  offset: number;
  value?: number;
}

/** Why a write request was refused; `index` is the failing op's position. */
export type WriteFailure =
  | { code: 'precondition_failed'; index: number; currentOffset: number | null }
  | { code: 'not_found'; index: number }
  | { code: 'not_a_number'; index: number }
  /** `value` (parsed JSON) and `offset`: the key as it stands without the refused request; offset null: no live value. */
  | { code: 'out_of_range'; index: number; value: unknown; offset: number | null }
  | { code: 'idempotency_key_reused' };

export type WriteOutcome = { ok: true; applied: AppliedOp[] } | { ok: false; failure: WriteFailure };

/** An HTTP answer: status, headers and the body's JSON text. */
export interface Answer {
  status: number;
  headers: Record<string, string>;
  body: string;
}
