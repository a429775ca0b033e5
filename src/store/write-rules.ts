// The rules of a write op that do not depend on where the log lives, shared by the
// SQLite store and the in-memory group plan of the PostgreSQL store.
import type { WriteFailure, WriteOp } from './log-store.js';

/** Thrown while applying a request to undo just that request (savepoint or overlay). */
export class Refusal extends Error {
  constructor(readonly failure: WriteFailure) {
    super(failure.code);
  }
}

/** Refuses the op unless its condition holds for the key's live offset (null: not live). */
export function checkCondition(op: WriteOp, liveOffset: number | null, index: number): void {
  if (
    (op.ifOffset !== undefined && liveOffset !== op.ifOffset) ||
    (op.ifAbsent && liveOffset !== null) ||
    (op.ifLive && liveOffset === null)
  ) {
    throw new Refusal({ code: 'precondition_failed', index, currentOffset: liveOffset });
  }
}

/** The result of an incr on the live value's JSON text (null: absent, counts as 0). */
export function incremented(by: number, liveValue: string | null, index: number): number {
  const base = liveValue === null ? 0 : (JSON.parse(liveValue) as unknown);
  // A stored number kept as written that a double does not hold (12345678901234567890,
  // 1.0000000000000000001) is not one incr can add to without changing it.
  const exact = typeof base === 'number' && (liveValue === null || JSON.stringify(base) === liveValue);
  const sum = exact ? base + by : NaN;
  if (!(Math.abs(sum) <= Number.MAX_SAFE_INTEGER)) throw new Refusal({ code: 'not_a_number', index });
  return sum;
}
