// JSON text for entries, records and write answers. Values are stored as JSON text,
// so answers are assembled around them instead of parsing and re-serialising.
import { ApiError, type ErrorCode, type ErrorDetails } from './errors.js';
import type { Answer, StoredEntry, StoredRecord, WriteFailure } from './model.js';

/** A value's expiry as it ends an entry or a record: everywhere a key's state travels, it carries it. */
const expiryJson = (expiresAt: number | null | undefined): string => (expiresAt == null ? '' : `,"expiresAt":${expiresAt}`);

/** A live key's entry (GET, listings, snapshot lines): with its expiry when it has one. */
export function entryJson(entry: StoredEntry): string {
  return `{"key":${JSON.stringify(entry.key)},"value":${entry.value},"offset":${entry.offset},"ts":${entry.ts}${expiryJson(entry.expiresAt)}}`;
}

/** A record: a set that is still its key's latest record carries the value's expiry. */
export function recordJson(record: StoredRecord): string {
  const head = `{"offset":${record.offset},"key":${JSON.stringify(record.key)},"op":"${record.op}"`;
  return record.value === null ? `${head},"ts":${record.ts}}` : `${head},"value":${record.value},"ts":${record.ts}${expiryJson(record.expiresAt)}}`;
}

export function jsonAnswer(status: number, body: unknown, headers: Record<string, string> = {}): Answer {
  return { status, headers, body: JSON.stringify(body) };
}

export function errorAnswer(code: ErrorCode, message: string, details: ErrorDetails = {}): Answer {
  const error = new ApiError(code, message, details);
  return jsonAnswer(error.statusCode, error.toBody());
}

const FAILURE_MESSAGES: Record<WriteFailure['code'], string> = {
  precondition_failed: 'the condition on the key does not hold',
  not_found: 'the key has no live value',
  not_a_number: 'the value is not a number, or the result is beyond ±(2^53 - 1)',
  out_of_range: 'the result would be outside the item\'s min and max',
  idempotency_key_reused: 'this Idempotency-Key was used with a different request',
};

/** The answer to a refused write. `withIndex` adds the failing item's index (batches). */
export function failureAnswer(failure: WriteFailure, withIndex: boolean): Answer {
  const { code, ...details } = failure;
  if (!withIndex && 'index' in details) delete (details as { index?: number }).index;
  return errorAnswer(code, FAILURE_MESSAGES[code], details);
}
