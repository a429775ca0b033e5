// The write rules of a group commit for both stores: planWrites() works a group out in memory
// and the store writes the plan as it is; a refused request leaves nothing in it.
import { termOf, type DigestSum, type Term } from '../contract/digest.js';
import { isExpired } from '../contract/expiry.js';
import type { AppliedOp, Answer, WriteFailure, WriteOp, WriteOutcome, WriteRequest, WriteResult } from './log-store.js';

/** A key's row in `state`: its latest record, whether it is live, and its expiry (ms; null or absent: never). */
export interface KeyState {
  offset: number;
  live: boolean;
  expiresAt?: number | null;
  /** The digest term of the live record at `offset`, when a store has it at hand. */
  term?: Term;
}

/** Whether the key is live now: a value past its expiry is absent at once, before the expirer's tombstone. */
export function liveAt(state: KeyState | undefined | null, now: number): boolean {
  return state !== undefined && state !== null && state.live && !isExpired(state.expiresAt, now);
}

export interface RememberedAnswer {
  fingerprint: string;
  /** JSON of what is replayed: rememberedJson's, or an Answer remembered before it. */
  answer: string;
  expiresAt: number;
}

/** The version of what is remembered: the outcome, which the route renders as it renders a fresh one. */
const OUTCOME_VERSION = 2;

function rememberedJson(outcome: WriteOutcome): string {
  return JSON.stringify({ v: OUTCOME_VERSION, outcome });
}

/** A replay: the outcome remembered, or the rendered answer that older versions remembered (until they expire). */
function replayOf(json: string): WriteResult {
  const remembered = JSON.parse(json) as { v: typeof OUTCOME_VERSION; outcome: WriteOutcome } | Answer;
  if ('v' in remembered && remembered.v === OUTCOME_VERSION) return { outcome: remembered.outcome, replayed: true, appended: 0 };
  return { answer: remembered as Answer, replayed: true, appended: 0 };
}

/** The committed state a plan starts from, read on demand: only what the group's requests ask for. */
export interface StateSource {
  state(key: string): KeyState | undefined;
  /** The JSON text of the key's live record at `offset` (asked only for incr). */
  liveValue(key: string, offset: number): string;
  /** The answer remembered for an idempotency key, expired or not. */
  remembered(idempotencyKey: string): RememberedAnswer | undefined;
}

export interface PlanInput {
  requests: WriteRequest[];
  /** The head before the group: its records take head + 1... */
  head: number;
  now: number;
  idempotencyTtlMs: number;
}

export interface PlannedRecord {
  offset: number;
  key: string;
  op: 'set' | 'delete';
  value: string | null;
  /** The key's state before this record (null: none), the group's included: what undoing its old contribution needs. */
  previous: KeyState | null;
}

export interface WritePlan {
  results: WriteResult[];
  base: number;
  /** The head after it: base + records.length. */
  head: number;
  records: PlannedRecord[];
  /** The final state row of every key the group wrote, with its live value's text (null: none). */
  state: Map<string, Written>;
  remember: Map<string, RememberedAnswer>;
  newKeys: number;
  liveDelta: number;
  /** True when a record superseded an earlier record of its key. */
  superseded: boolean;
}

/** A key as the group's accepted records left it; `value` is the live value's text. */
export interface Written extends KeyState {
  value: string | null;
}

/** The keys and idempotency keys a group reads, and which keys it increments. */
export function groupKeys(requests: WriteRequest[]): { keys: string[]; incrKeys: string[]; idempotencyKeys: string[] } {
  const keys = new Set<string>();
  const incrKeys = new Set<string>();
  const idempotencyKeys = new Set<string>();
  for (const request of requests) {
    if (request.idempotency) idempotencyKeys.add(request.idempotency.key);
    for (const op of request.ops) {
      keys.add(op.key);
      if (op.op === 'incr') incrKeys.add(op.key);
    }
  }
  return { keys: [...keys], incrKeys: [...incrKeys], idempotencyKeys: [...idempotencyKeys] };
}

// Whether a condition may meet a record of the group itself: the outcome then depends on the
// head (`ifOffset: 1` would hold at offsets 1...), so it is planned once the head is known.
export function conditionsOnOwnOffsets(requests: WriteRequest[]): boolean {
  const written = new Set<string>();
  for (const request of requests) {
    for (const op of request.ops) {
      if ((op.ifOffset !== undefined || op.ifAbsent || op.ifLive) && written.has(op.key)) return true;
      written.add(op.key);
    }
  }
  return false;
}

/** Applies the requests in order to the state `source` reads; reads nothing else and writes nothing. */
export function planWrites(input: PlanInput, source: StateSource): WritePlan {
  const planner = new Planner(input.head, input.now, source);
  const results: WriteResult[] = [];
  const remember = new Map<string, RememberedAnswer>();
  for (const request of input.requests) {
    const { idempotency } = request;
    if (idempotency) {
      const prior = remember.get(idempotency.key) ?? source.remembered(idempotency.key);
      if (prior && prior.expiresAt >= input.now) {
        if (prior.fingerprint === idempotency.fingerprint) {
          results.push(replayOf(prior.answer));
        } else {
          results.push({ outcome: { ok: false, failure: { code: 'idempotency_key_reused' } }, replayed: false, appended: 0 });
        }
        continue;
      }
    }
    const outcome = planner.request(request.ops);
    if (idempotency) {
      remember.set(idempotency.key, {
        fingerprint: idempotency.fingerprint,
        answer: rememberedJson(outcome),
        expiresAt: input.now + input.idempotencyTtlMs,
      });
    }
    results.push({ outcome, replayed: false, appended: outcome.ok ? outcome.applied.length : 0 });
  }
  return {
    results,
    base: input.head,
    head: planner.head,
    records: planner.records,
    state: planner.written,
    remember,
    newKeys: planner.newKeys,
    liveDelta: planner.liveDelta,
    superseded: planner.superseded,
  };
}

// Applies a plan's records to the state digest in place (+ each live record's term, - the
// one it superseded); returns each record's term (null: a delete). For a plan at the real head.
export function applyToDigest(digest: DigestSum, plan: Pick<WritePlan, 'base' | 'records'>): (Term | null)[] {
  const terms: (Term | null)[] = [];
  for (const record of plan.records) {
    const previous = record.previous;
    if (previous?.live) {
      const own = previous.offset > plan.base ? terms[previous.offset - plan.base - 1] : undefined;
      digest.subtract(own ?? previous.term ?? termOf(record.key, previous.offset));
    }
    const term = record.value === null ? null : termOf(record.key, record.offset);
    if (term) digest.add(term);
    terms.push(term);
  }
  return terms;
}

/** The refusal of an op, unless its condition holds for the key's live offset (null: not live). */
function conditionFailure(op: WriteOp, liveOffset: number | null, index: number): WriteFailure | null {
  if (
    (op.ifOffset !== undefined && liveOffset !== op.ifOffset) ||
    (op.ifAbsent && liveOffset !== null) ||
    (op.ifLive && liveOffset === null)
  ) {
    return { code: 'precondition_failed', index, currentOffset: liveOffset };
  }
  return null;
}

/** An incr's result on the live value's JSON text (null: absent, counts as 0); NaN when refused. */
function incremented(by: number, liveValue: string | null): number {
  const base = liveValue === null ? 0 : (JSON.parse(liveValue) as unknown);
  // A stored number kept as written that a double does not hold (12345678901234567890,
  // 1.0000000000000000001) is not one incr can add to without changing it.
  const exact = typeof base === 'number' && (liveValue === null || JSON.stringify(base) === liveValue);
  const sum = exact ? base + by : NaN;
  return Math.abs(sum) <= Number.MAX_SAFE_INTEGER ? sum : NaN;
}

/** The group's accepted records so far; a request's changes are journalled, undone if a later op of it is refused. */
class Planner {
  readonly records: PlannedRecord[] = [];
  readonly written = new Map<string, Written>();
  newKeys = 0;
  liveDelta = 0;
  superseded = false;
  /** Keys the current request changed, each followed by what `written` held for it before. */
  private readonly undo: (string | Written | undefined)[] = [];

  head: number;

  constructor(
    private readonly base: number,
    private readonly now: number,
    private readonly source: StateSource,
  ) {
    this.head = base;
  }

  request(ops: WriteOp[]): WriteOutcome {
    const { head, newKeys, liveDelta, superseded } = this;
    this.undo.length = 0;
    const applied: AppliedOp[] = [];
    for (let index = 0; index < ops.length; index++) {
      const result = this.apply(ops[index]!, index);
      if ('code' in result) {
        for (let i = this.undo.length - 2; i >= 0; i -= 2) {
          const key = this.undo[i] as string;
          const before = this.undo[i + 1] as Written | undefined;
          if (before) this.written.set(key, before);
          else this.written.delete(key);
        }
        this.records.length = head - this.base;
        Object.assign(this, { head, newKeys, liveDelta, superseded });
        if (result.code === 'out_of_range') Object.assign(result, this.standing(ops[index]!.key));
        return { ok: false, failure: result };
      }
      applied.push(result);
    }
    return { ok: true, applied };
  }

  /** A key's live value (parsed) and offset as the group's accepted records left it. */
  private standing(key: string): { value: unknown; offset: number | null } {
    const written = this.written.get(key);
    const current = written ?? this.source.state(key);
    if (!liveAt(current, this.now)) return { value: null, offset: null };
    const text = written ? written.value! : this.source.liveValue(key, current!.offset);
    return { value: JSON.parse(text) as unknown, offset: current!.offset };
  }

  private apply(op: WriteOp, index: number): AppliedOp | WriteFailure {
    const written = this.written.get(op.key);
    const current = written ?? this.source.state(op.key);
    // The expirer's delete names a value that has expired: it alone sees it as live.
    const live = op.op === 'delete' && op.expiry ? current?.live === true : liveAt(current, this.now);
    const liveOffset = live ? current!.offset : null;
    const refused = conditionFailure(op, liveOffset, index);
    if (refused) return refused;
    switch (op.op) {
      case 'set': {
        const expiresAt = op.ttlMs === undefined ? null : this.now + op.ttlMs;
        return { key: op.key, offset: this.append(op.key, op.value, current, written, expiresAt) };
      }
      case 'delete':
        if (liveOffset === null) return { code: 'not_found', index };
        return { key: op.key, offset: this.append(op.key, null, current, written, null) };
      case 'incr': {
        const before = liveOffset === null ? null : written ? written.value : this.source.liveValue(op.key, liveOffset);
        const sum = incremented(op.by, before);
        if (Number.isNaN(sum)) return { code: 'not_a_number', index };
        if ((op.min !== undefined && sum < op.min) || (op.max !== undefined && sum > op.max)) {
          // The key as it stands is filled in once the request's own records are undone.
          return { code: 'out_of_range', index, value: null, offset: null };
        }
        return { key: op.key, offset: this.append(op.key, JSON.stringify(sum), current, written, null), value: sum };
      }
    }
  }

  /** Appends a record; `expiresAt` is the new value's expiry (a write without a TTL clears it). */
  private append(key: string, value: string | null, current: KeyState | undefined, written: Written | undefined, expiresAt: number | null): number {
    const offset = ++this.head;
    const live = value !== null;
    // Never changed once made (a key's next record gets a new object), so shared as it is.
    const previous = current ?? null;
    this.records.push({ offset, key, op: live ? 'set' : 'delete', value, previous });
    this.undo.push(key, written);
    this.written.set(key, { offset, live, value, expiresAt });
    if (previous) this.superseded = true;
    else this.newKeys += 1;
    this.liveDelta += Number(live) - Number(previous?.live ?? false);
    return offset;
  }
}
