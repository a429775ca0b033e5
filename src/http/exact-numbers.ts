// Numbers as written: a body holding a number whose text JSON.stringify would not give back is
// parsed again losslessly (docs/design.md); a scan of the text keeps most bodies on the plain path.
import { isLosslessNumber, parse as parseLossless, stringify as stringifyLossless } from 'lossless-json';
import { ApiError } from '../contract/errors.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** The body's lossless parse (exactNumbers), when it holds a number JSON.parse changed. */
    exactBody: Record<string, unknown> | undefined;
  }
}

/**
 * What any number that JSON.stringify would write differently contains: 16+ digits, a fraction,
 * an exponent, or -0. The 16 digits are looked for only where a run of digits starts: tried at
 * every digit, a run of 13 (a time in ms, a bound such as 1e12 written out) cost some 90 steps.
 */
const MAYBE_INEXACT = /(?<!\d)\d{16}|\d[.eE]|-0/;
const NUMBER_TEXT = /-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?/g;

// The largest body parsed losslessly: that costs some 0.2 ms a KiB, ten times JSON.parse, so a larger
// one holding such a number is refused with 413 and none holds the loop much over 50 ms.
export const MAX_EXACT_BODY_BYTES = 128 * 1024;

function rewritten(text: string): boolean {
  return JSON.stringify(Number(text)) !== text;
}

function holdsRewrittenNumber(tree: unknown): boolean {
  const pending = [tree];
  while (pending.length > 0) {
    const next = pending.pop();
    if (isLosslessNumber(next)) {
      if (rewritten(next.value)) return true;
    } else if (next !== null && typeof next === 'object') {
      for (const child of Object.values(next)) pending.push(child);
    }
  }
  return false;
}

/** Whether `text` may hold a number that JSON.parse and JSON.stringify would not give back as written. */
function holdsExactNumber(text: string): boolean {
  if (!MAYBE_INEXACT.test(text)) return false;
  for (const match of text.matchAll(NUMBER_TEXT)) if (rewritten(match[0])) return true;
  return false;
}

/** 413 for a body over MAX_EXACT_BODY_BYTES holding a number kept as written, before it is parsed at all. */
export function checkExactBodySize(text: string, bytes: number): void {
  if (bytes <= MAX_EXACT_BODY_BYTES || !holdsExactNumber(text)) return;
  throw new ApiError(
    'payload_too_large',
    `the body holds a number kept as written (such as 1.0, 1e3 or 12345678901234567890) and is ${bytes} bytes; such a body may be at most ${MAX_EXACT_BODY_BYTES}: send it in smaller requests, or write its numbers as JSON writes them back (1 for 1.0)`,
    { limit: MAX_EXACT_BODY_BYTES },
  );
}

/** A lossless parse of `text` when some number in `parsed` would not come back as written. */
export function exactNumbers(text: string, parsed: unknown): Record<string, unknown> | undefined {
  if (parsed === null || typeof parsed !== 'object' || !holdsExactNumber(text)) return undefined;
  let tree: unknown;
  try {
    tree = parseLossless(text);
  } catch (err) {
    // JSON.parse took it, so this is a member name given twice (JSON.parse keeps the last).
    const detail = err instanceof Error ? err.message : String(err);
    throw new ApiError('invalid_json', `the body holds a number kept as written and ${detail}; give each member once`);
  }
  return holdsRewrittenNumber(tree) ? (tree as Record<string, unknown>) : undefined;
}

/** JSON text of part of a lossless parse, numbers as written. */
export function exactText(tree: unknown): string {
  return stringifyLossless(tree) ?? 'null';
}
