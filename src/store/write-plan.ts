// The write rules of a group commit, in one place for both stores: conditions, incr and
// its limits, delete of an absent key, a later op seeing an earlier one, idempotency
// replays. planWrites() works a group out in memory from the keys' current state, which
// the store supplies through a StateSource, and returns a WritePlan: the records to
// append, each with its key's previous state, the final state rows, the answers to
// remember and the changes of the counters. The store then writes the plan as it is;
// a refused request leaves nothing in it, so a refusal never touches its neighbours.
import { termOf, type DigestSum, type Term } from '../contract/digest.js';
import { isExpired } from '../contract/expiry.js';
import type { AppliedOp, Answer, WriteFailure, WriteOp, WriteOutcome, WriteRequest, WriteResult } from './log-store.js';

/**
 * A key's row in `state`: its latest record, whether that record is a live value, and
 * when that value expires (ms since the epoch; null or absent: never).
 */
export interface KeyState {
  offset: number;
  live: boolean;
  expiresAt?: number | null;
  /** The digest term of the live record at `offset`, when a store has it at hand. */
  term?: Term;
}

/**
 * True when the key has a live value now: a value past its expiry counts as absent for
 * reads and conditions at once, before the expirer's tombstone is in the log.
 */
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

/**
 * The committed state that a plan starts from, read on demand: a store reads only what
 * the group's requests ask for (a SQLite lookup is a cache hit or a SELECT).
 */
export interface StateSource {
  /** The key's state row, or undefined when it has none. */
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
  /** The clock, for idempotency expiry. */
  now: number;
  idempotencyTtlMs: number;
}

export interface PlannedRecord {
  offset: number;
  key: string;
  op: 'set' | 'delete';
  /** JSON text; null for a delete marker. */
  value: string | null;
  /**
   * The key's state just before this record (null: the key had no state row), an
   * earlier record of the same group included. What a per-record extra needs to undo
   * the key's old contribution (a live-key count, a digest, an expiry).
   */
  previous: KeyState | null;
}

export interface WritePlan {
  /** One per request, in order. */
  results: WriteResult[];
  /** The head before the group. */
  base: number;
  /** The head after it: base + records.length. */
  head: number;
  /** Records to append, in offset order. */
  records: PlannedRecord[];
  /** The final state row of every key the group wrote, with its live value's text (null: none). */
  state: Map<string, Written>;
  /** Answers to remember, by idempotency key. */
  remember: Map<string, RememberedAnswer>;
  /** Keys that got a state row. */
  newKeys: number;
  /** Change of the number of live keys. */
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

/**
 * True when a condition may be checked against a record of the group itself: an op with
 * a condition on a key that an earlier op of the group writes. Such a group's outcome
 * depends on the head it starts from (offsets 1... instead of head + 1... would satisfy
 * `ifOffset: 1`, and a refusal names the record's offset as the current one), so it
 * cannot be planned before the head is known.
 */
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

/**
 * Applies a plan's records to the state digest (src/contract/digest.ts) in place: + the
 * term of each live record, - the term of the live record it superseded (taken from the
 * group's own terms or the previous state's `term` when known, else hashed again). Returns
 * each record's term (null for a delete marker), for the store to keep with its key. For
 * a plan made at the real head (a store that assigns offsets elsewhere, as
 * statelog_append on PostgreSQL, works it out there).
 */
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

/**
 * The group's accepted records so far. A request's changes are journalled as they are
 * made and undone when a later op of it is refused, so no request needs a copy of the
 * state of its own.
 */
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
        return { ok: false, failure: result };
      }
      applied.push(result);
    }
    return { ok: true, applied };
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
