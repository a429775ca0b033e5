// Idempotency-Key's rules and the request fingerprint; the store remembers the answer with the write.
import { createHash } from 'node:crypto';
import { ApiError } from '../contract/errors.js';

const VISIBLE_ASCII = /^[\x21-\x7e]{1,255}$/;

/** The key as remembered, per token entry (null: auth off): "<name> <key>" never collides, names holding no space. */
export function idempotencyKey(header: string | string[] | undefined, name: string | null = null): string | undefined {
  if (header === undefined) return undefined;
  if (Array.isArray(header) || !VISIBLE_ASCII.test(header)) {
    throw new ApiError('invalid_request', 'Idempotency-Key must be 1 to 255 visible ASCII characters');
  }
  return name === null ? header : `${name} ${header}`;
}

/** What makes two requests the same: method, path, conditional headers and the body as parsed JSON. */
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
