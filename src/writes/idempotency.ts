// Idempotency-Key handling: the header's rules and the request fingerprint. The answer
// itself is remembered by the store, in the same transaction as the write it answers.
import { createHash } from 'node:crypto';
import { ApiError } from '../contract/errors.js';

const VISIBLE_ASCII = /^[\x21-\x7e]{1,255}$/;

/**
 * The key as remembered: per token entry (`name`; null with auth off), so that two
 * tokens choosing the same key make two requests. A name holds no space and a key
 * only visible ASCII, so "<name> <key>" never collides with another pair or with a
 * key remembered with auth off.
 */
export function idempotencyKey(header: string | string[] | undefined, name: string | null = null): string | undefined {
  if (header === undefined) return undefined;
  if (Array.isArray(header) || !VISIBLE_ASCII.test(header)) {
    throw new ApiError('invalid_request', 'Idempotency-Key must be 1 to 255 visible ASCII characters');
  }
  return name === null ? header : `${name} ${header}`;
}

/**
 * What makes two requests "the same": method, path, the conditional headers and the
 * body (as parsed JSON, so insignificant whitespace does not matter).
 */
export function fingerprint(parts: {
  method: string;
  path: string;
  ifMatch?: string | string[] | undefined;
  ifNoneMatch?: string | string[] | undefined;
  body: unknown;
}): string {
  let text: string;
  try {
    text = JSON.stringify([parts.method, parts.path, parts.ifMatch ?? null, parts.ifNoneMatch ?? null, parts.body ?? null]);
  } catch {
    // A body nested too deeply to serialise (JSON.parse takes depths JSON.stringify does not).
    throw new ApiError('invalid_request', 'the body is nested too deeply');
  }
  return createHash('sha256').update(text).digest('base64url');
}
