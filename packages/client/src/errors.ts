// Errors the client throws, typed by the contract's error codes, plus the two a client
// meets without an answer: `unreachable` and `timeout`.
import type { ErrorCode } from '../../../src/contract/errors.js';

export type { ErrorCode };

/** No answer came: the server could not be reached, or did not answer in time (status 0). */
export type ConnectionErrorCode = 'unreachable' | 'timeout';

/**
 * An error answer from the server (`code` the contract's code, `details` the rest of
 * `error`), or no answer at all: status 0 with code `unreachable` or `timeout`, the
 * message naming the URL and the cause, `details.cause` the system's code (ECONNREFUSED...).
 */
export class StatelogError extends Error {
  constructor(
    readonly status: number,
    readonly code: ErrorCode | ConnectionErrorCode | (string & {}),
    message: string,
    readonly details: Record<string, unknown> = {},
    options?: ErrorOptions,
  ) {
    super(message, options);
    this.name = 'StatelogError';
  }

  /** True for the 410s that mean "take a new snapshot". */
  get mustResnapshot(): boolean {
    return this.code === 'offset_compacted' || this.code === 'offset_ahead' || this.code === 'epoch_changed' || this.code === 'log_diverged';
  }

  /** True when no answer came (unreachable or timed out): worth trying again. */
  get isConnectionError(): boolean {
    return this.code === 'unreachable' || this.code === 'timeout';
  }

  /** True for 401 and 403: trying again with the same token cannot help. */
  get isAuthError(): boolean {
    return this.status === 401 || this.status === 403;
  }
}

/** A stream that ended before its last line or event: the data read so far is incomplete. */
export class CutStreamError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'CutStreamError';
  }
}

export function isStatelogError(err: unknown, code?: ErrorCode | ConnectionErrorCode): err is StatelogError {
  return err instanceof StatelogError && (code === undefined || err.code === code);
}

/** What the system's error codes mean, in words a person reads. */
const CAUSES: Record<string, string> = {
  ECONNREFUSED: 'connection refused',
  ECONNRESET: 'connection reset',
  ENOTFOUND: 'host not found',
  EAI_AGAIN: 'host name lookup failed',
  ETIMEDOUT: 'connection timed out',
  EHOSTUNREACH: 'host unreachable',
  ENETUNREACH: 'network unreachable',
  EPIPE: 'connection closed',
  UND_ERR_SOCKET: 'connection closed',
  UND_ERR_CONNECT_TIMEOUT: 'connection timed out',
  UND_ERR_HEADERS_TIMEOUT: 'no answer in time',
  UND_ERR_BODY_TIMEOUT: 'no data in time',
  ERR_TLS_CERT_ALTNAME_INVALID: 'TLS certificate does not match the host',
  DEPTH_ZERO_SELF_SIGNED_CERT: 'self-signed TLS certificate',
  UNABLE_TO_VERIFY_LEAF_SIGNATURE: 'TLS certificate not trusted',
};

/** The innermost cause of a failed fetch: its system code (when it has one) and words for it. */
export function describeCause(err: unknown): { code: string | undefined; text: string } {
  let cause: unknown = err;
  // fetch's TypeError('fetch failed') wraps undici's error, which may wrap the socket's.
  while (cause instanceof Error && cause.cause instanceof Error) cause = cause.cause;
  const inner = cause as (Error & { code?: unknown; errors?: unknown[] }) | undefined;
  // A host with several addresses fails with an AggregateError of one error each.
  const first = Array.isArray(inner?.errors) ? (inner.errors[0] as { code?: unknown } | undefined) : undefined;
  const code = typeof inner?.code === 'string' ? inner.code : typeof first?.code === 'string' ? first.code : undefined;
  const text = (code && CAUSES[code]) ?? (inner instanceof Error && inner.message ? inner.message : String(err));
  return { code, text };
}

/** A fetch that failed without an answer, as a StatelogError naming the URL and the cause. */
export function connectionError(url: string, err: unknown): StatelogError {
  const { code, text } = describeCause(err);
  return new StatelogError(0, 'unreachable', `cannot reach ${url}: ${text}`, { url, ...(code ? { cause: code } : {}) }, { cause: err });
}

export function timeoutError(url: string, timeoutMs: number): StatelogError {
  return new StatelogError(0, 'timeout', `no answer from ${url} within ${timeoutMs} ms`, { url, timeoutMs });
}
