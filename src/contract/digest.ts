// The state digest: an order-free hash of the live state that a client can reproduce.
// digest = the sum mod 2^64 of term(key, offset) over the live keys, where term is the
// first 8 bytes, as a big-endian unsigned integer, of SHA-256 of "<offset>:<key>" in
// UTF-8. The offset names the value, so the value's text need not be hashed; a sum can
// be updated by each write (+ the new record's term, - the superseded one's).
import { hash } from 'node:crypto';

export function digestTerm(key: string, offset: number): bigint {
  // One-shot hash, read from its hex: a few times cheaper than a Hash object and a Buffer,
  // which counts where a whole state is summed (a mirror's snapshot, a digest rebuild).
  return BigInt(`0x${hash('sha256', `${offset}:${key}`).slice(0, 16)}`);
}

/** The digest as sent: 16 lowercase hex digits. */
export function digestHex(digest: bigint): string {
  return BigInt.asUintN(64, digest).toString(16).padStart(16, '0');
}

/** The digest of a set of live keys, each with its record's offset. */
export function digestOf(entries: Iterable<{ key: string; offset: number }>): bigint {
  let sum = 0n;
  for (const entry of entries) sum += digestTerm(entry.key, entry.offset);
  return BigInt.asUintN(64, sum);
}
