// The contract's error codes, defined once. Everything that answers >= 400 throws an
// ApiError (or a fastify error that error-handler.ts maps to one).

export const ERROR_STATUS = {
  invalid_json: 400,
  invalid_request: 400,
  invalid_key: 400,
  unauthorized: 401,
  forbidden: 403,
  not_found: 404,
  offset_compacted: 410,
  offset_ahead: 410,
  epoch_changed: 410,
  log_diverged: 410,
  conflict: 409,
  out_of_range: 409,
  precondition_failed: 412,
  payload_too_large: 413,
  unsupported_media_type: 415,
  idempotency_key_reused: 422,
  not_a_number: 422,
  too_many_requests: 429,
  internal: 500,
  unavailable: 503,
} as const;

export type ErrorCode = keyof typeof ERROR_STATUS;

/** Extra members that sit inside `error`, such as currentOffset, index or horizon. */
export type ErrorDetails = Record<string, unknown>;

export interface ErrorBody {
  error: { code: ErrorCode; message: string } & ErrorDetails;
}

export class ApiError extends Error {
  readonly statusCode: number;

  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly details: ErrorDetails = {},
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
    this.name = 'ApiError';
    this.statusCode = ERROR_STATUS[code];
  }

  toBody(): ErrorBody {
    return { error: { code: this.code, message: this.message, ...this.details } };
  }
}

/** 503 for a database that cannot be used now: a node reconnects within a second of it coming back. */
export function databaseUnavailable(message = 'the database is unavailable; retry later', details: ErrorDetails = {}): ApiError {
  return new ApiError('unavailable', message, details, { 'retry-after': '1' });
}

/**
 * 503 for a write that was sent to the database but not confirmed durable: it may be applied. A retry
 * with the same Idempotency-Key returns the committed answer, or commits it once.
 */
export function outcomeUnknown(message = 'the write may or may not have been committed; retry it with the same Idempotency-Key'): ApiError {
  return new ApiError('unavailable', message, { outcome: 'unknown' }, { 'retry-after': '1' });
}
