// The state digest: an order-free hash of the live state that a client can reproduce.
// digest = the sum mod 2^64 of term(key, offset) over the live keys, where term is the
// first 8 bytes, as a big-endian unsigned integer, of SHA-256 of "<offset>:<key>" in
// UTF-8. The offset names the value, so the value's text need not be hashed; a sum can
// be updated by each write (+ the new record's term, - the superseded one's).
import { hash } from 'node:crypto';

/** A term as its two 32-bit halves, so the write path adds terms without BigInt. */
export interface Term {
  hi: number;
  lo: number;
}

const TWO_32 = 2 ** 32;

export function termOf(key: string, offset: number): Term {
  // One-shot hash: no Hash object a term (a third of createHash's cost).
  const bytes = hash('sha256', `${offset}:${key}`, 'buffer');
  return { hi: bytes.readUInt32BE(0), lo: bytes.readUInt32BE(4) };
}

export function digestTerm(key: string, offset: number): bigint {
  const { hi, lo } = termOf(key, offset);
  return (BigInt(hi) << 32n) | BigInt(lo);
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

/**
 * A digest mod 2^64 in two 32-bit halves, changed in place term by term: each step
 * carries or borrows at once, so both halves stay exact doubles.
 */
export class DigestSum {
  constructor(
    private hi = 0,
    private lo = 0,
  ) {}

  static fromHex(hex: string): DigestSum {
    return new DigestSum(Number.parseInt(hex.slice(0, 8), 16), Number.parseInt(hex.slice(8, 16), 16));
  }

  copy(): DigestSum {
    return new DigestSum(this.hi, this.lo);
  }

  add(term: Term): void {
    const lo = this.lo + term.lo;
    const carry = lo >= TWO_32 ? 1 : 0;
    this.lo = lo - carry * TWO_32;
    this.hi = (this.hi + term.hi + carry) >>> 0;
  }

  subtract(term: Term): void {
    const lo = this.lo - term.lo;
    const borrow = lo < 0 ? 1 : 0;
    this.lo = lo + borrow * TWO_32;
    this.hi = (this.hi - term.hi - borrow) >>> 0;
  }

  hex(): string {
    return this.hi.toString(16).padStart(8, '0') + this.lo.toString(16).padStart(8, '0');
  }
}
