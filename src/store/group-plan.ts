// The write rules of a group commit, worked out in memory for a store whose database is
// a network round trip away (PostgreSQL). The store locks the counters, reads the state
// of every key and idempotency key the group names, and this module applies the
// requests in order exactly as SqliteStore.apply() does: conditions, incr, not_found,
// idempotency replays. Each request works on its own overlay, dropped when it is
// refused, so a refusal never touches its neighbours (the in-memory equivalent of a
// savepoint). The store then writes the outcome in one statement.
import type { AppliedOp, Answer, WriteOp, WriteRequest, WriteResult } from './log-store.js';
import { checkCondition, incremented, Refusal } from './write-rules.js';

/** A key's row in `state`, with its live value's JSON text when the group increments it. */
export interface KeyState {
  seq: number;
  live: boolean;
  value: string | null;
}

export interface RememberedAnswer {
  fingerprint: string;
  /** JSON of the Answer. */
  answer: string;
  expiresAt: number;
}

export interface GroupInput {
  requests: WriteRequest[];
  /** The head when the group's lock was taken. */
  head: number;
  /** The commit time given to every record of the group. */
  ts: number;
  /** The clock, for idempotency expiry. */
  now: number;
  idempotencyTtlMs: number;
  /** State rows of the keys the group names (absent: the key has no row). */
  state: ReadonlyMap<string, KeyState>;
  /** Remembered answers of the idempotency keys the group names. */
  answers: ReadonlyMap<string, RememberedAnswer>;
}

export interface PlannedRecord {
  seq: number;
  key: string;
  op: 'set' | 'delete';
  value: string | null;
}

export interface GroupPlan {
  results: WriteResult[];
  /** Records to append, in offset order. */
  records: PlannedRecord[];
  /** The final state row of every key the group wrote. */
  state: Map<string, { seq: number; live: boolean }>;
  /** Answers to remember, by idempotency key. */
  remember: Map<string, RememberedAnswer>;
  head: number;
  /** Changes of the counters: keys that got a state row, and live keys. */
  newKeys: number;
  liveDelta: number;
  /** True when a record superseded an earlier record of its key. */
  superseded: boolean;
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
 * True when an offset condition may be checked against a record of the group itself: an
 * op with `ifOffset` on a key that an earlier op of the group writes. Such a group's
 * decisions depend on the offsets it is given, so it cannot be planned before the head
 * is known (offsets 1... instead of head + 1... would satisfy `ifOffset: 1`).
 */
export function conditionsOnOwnOffsets(requests: WriteRequest[]): boolean {
  const written = new Set<string>();
  for (const request of requests) {
    for (const op of request.ops) {
      if (op.ifOffset !== undefined && written.has(op.key)) return true;
      written.add(op.key);
    }
  }
  return false;
}

export function planGroup(input: GroupInput): GroupPlan {
  const plan: GroupPlan = {
    results: [],
    records: [],
    state: new Map(),
    remember: new Map(),
    head: input.head,
    newKeys: 0,
    liveDelta: 0,
    superseded: false,
  };
  // Key states as the requests applied so far left them, values included.
  const current = new Map<string, KeyState | undefined>();
  const lookup = (key: string): KeyState | undefined => (current.has(key) ? current.get(key) : input.state.get(key));

  for (const request of input.requests) {
    const { idempotency } = request;
    if (idempotency) {
      const prior = plan.remember.get(idempotency.key) ?? input.answers.get(idempotency.key);
      if (prior && prior.expiresAt >= input.now) {
        if (prior.fingerprint === idempotency.fingerprint) {
          plan.results.push({ answer: JSON.parse(prior.answer) as Answer, replayed: true, appended: 0 });
        } else {
          const answer = request.render({ ok: false, failure: { code: 'idempotency_key_reused' } });
          plan.results.push({ answer, replayed: false, appended: 0 });
        }
        continue;
      }
    }

    const overlay = new RequestOverlay(lookup, plan.head, input.ts);
    let answer: Answer;
    let appended = 0;
    try {
      const applied = request.ops.map((op, index) => overlay.apply(op, index));
      answer = request.render({ ok: true, applied });
      overlay.mergeInto(plan, current);
      appended = applied.length;
    } catch (err) {
      if (!(err instanceof Refusal)) throw err;
      answer = request.render({ ok: false, failure: err.failure });
    }
    if (idempotency) {
      plan.remember.set(idempotency.key, {
        fingerprint: idempotency.fingerprint,
        answer: JSON.stringify(answer),
        expiresAt: input.now + input.idempotencyTtlMs,
      });
    }
    plan.results.push({ answer, replayed: false, appended });
  }
  return plan;
}

/** One request's changes, kept apart until it has succeeded. */
class RequestOverlay {
  private readonly changed = new Map<string, KeyState>();
  private readonly records: PlannedRecord[] = [];
  private newKeys = 0;
  private liveDelta = 0;
  private superseded = false;

  constructor(
    private readonly before: (key: string) => KeyState | undefined,
    private head: number,
    private readonly ts: number,
  ) {}

  private lookup(key: string): KeyState | undefined {
    return this.changed.get(key) ?? this.before(key);
  }

  apply(op: WriteOp, index: number): AppliedOp {
    const current = this.lookup(op.key);
    const liveOffset = current?.live ? current.seq : null;
    checkCondition(op, liveOffset, index);
    switch (op.op) {
      case 'set':
        return { key: op.key, offset: this.append(op.key, op.value, current) };
      case 'delete':
        if (liveOffset === null) throw new Refusal({ code: 'not_found', index });
        return { key: op.key, offset: this.append(op.key, null, current) };
      case 'incr': {
        const sum = incremented(op.by, liveOffset === null ? null : current!.value, index);
        return { key: op.key, offset: this.append(op.key, JSON.stringify(sum), current), value: sum };
      }
    }
  }

  private append(key: string, value: string | null, current: KeyState | undefined): number {
    const seq = ++this.head;
    const live = value !== null;
    this.records.push({ seq, key, op: live ? 'set' : 'delete', value });
    this.changed.set(key, { seq, live, value });
    if (!current) this.newKeys += 1;
    else this.superseded = true;
    this.liveDelta += Number(live) - Number(current?.live ?? false);
    return seq;
  }

  mergeInto(plan: GroupPlan, current: Map<string, KeyState | undefined>): void {
    for (const [key, state] of this.changed) {
      current.set(key, state);
      plan.state.set(key, { seq: state.seq, live: state.live });
    }
    plan.records.push(...this.records);
    plan.head = this.head;
    plan.newKeys += this.newKeys;
    plan.liveDelta += this.liveDelta;
    plan.superseded ||= this.superseded;
  }
}
