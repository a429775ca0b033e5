// Errors the client throws, typed by the contract's error codes.
import type { ErrorCode } from '../../../src/contract/errors.js';

export type { ErrorCode };

/** An error answer from the server: `code` is the contract's code, `details` the rest of `error`. */
export class StatelogError extends Error {
  constructor(
    readonly status: number,
    readonly code: ErrorCode | string,
    message: string,
    readonly details: Record<string, unknown> = {},
  ) {
    super(message);
    this.name = 'StatelogError';
  }

  /** True for the 410s that mean "take a new snapshot". */
  get mustResnapshot(): boolean {
    return this.code === 'offset_compacted' || this.code === 'offset_ahead' || this.code === 'epoch_changed';
  }
}

/** A stream that ended before its last line or event: the data read so far is incomplete. */
export class CutStreamError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'CutStreamError';
  }
}

export function isStatelogError(err: unknown, code?: ErrorCode): err is StatelogError {
  return err instanceof StatelogError && (code === undefined || err.code === code);
}
