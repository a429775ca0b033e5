// The contract's rules for keys and key prefixes, checked once for every route.
import { ApiError, type ErrorCode } from './errors.js';

export const MAX_KEY_BYTES = 512;

// C0 controls and DEL; other Unicode, spaces and '/' are allowed.
const CONTROL = /[\u0000-\u001f\u007f]/;

function problem(text: string): string | null {
  if (!text.isWellFormed()) return 'is not valid UTF-8 (lone surrogate)';
  if (CONTROL.test(text)) return 'contains a control character';
  // A UTF-16 code unit is at most 3 bytes of UTF-8: a short text needs no count.
  if (text.length * 3 > MAX_KEY_BYTES && Buffer.byteLength(text, 'utf8') > MAX_KEY_BYTES) return `is longer than ${MAX_KEY_BYTES} bytes`;
  return null;
}

function check(text: string, what: string, code: ErrorCode, extra: Record<string, unknown> = {}): string {
  const found = problem(text);
  if (found) throw new ApiError(code, `${what} ${found}`, extra);
  return text;
}

/** A key: 1 to 512 bytes of UTF-8, no control characters. */
export function checkKey(key: string, extra: Record<string, unknown> = {}): string {
  if (key.length === 0) throw new ApiError('invalid_key', 'key must not be empty', extra);
  return check(key, 'key', 'invalid_key', extra);
}

/** A prefix follows the key rules but may be empty (= every key). */
export function checkPrefix(prefix: string): string {
  return check(prefix, 'prefix', 'invalid_request');
}

/** What a reader of changes watches: keys with `prefix`, or exactly `key`; not both (a prefix could only narrow a key). */
export function checkWatchFilter(prefix: string, key: string | undefined): { prefix: string; key?: string } {
  if (key === undefined) return { prefix: checkPrefix(prefix) };
  if (prefix !== '') throw new ApiError('invalid_request', 'give "key" or "prefix", not both');
  return { prefix: '', key: checkKey(key) };
}
