// The state digest: an order-free hash of the live state that a client can reproduce, updated by each
// write (+ the new record's term, - the superseded one's); docs/ttl-and-digest.md defines it.
import { hash } from 'node:crypto';

/** A term as its two 32-bit halves, so the write path adds terms without BigInt. */
export interface Term {
  hi: number;
  lo: number;
}

const TWO_32 = 2 ** 32;

export function termOf(key: string, offset: number): Term {
  const text = `${offset}:${key}`;
  const short = oneBlockTerm(text);
  if (short) return short;
  const bytes = hash('sha256', text, 'buffer');
  return { hi: bytes.readUInt32BE(0), lo: bytes.readUInt32BE(4) };
}

// SHA-256 (FIPS 180-4) of one 64-byte block in JavaScript: node:crypto costs several times the hash of so
// short a text. The constants are the standard's.
const PRIMES: number[] = [];
for (let n = 2; PRIMES.length < 64; n++) if (PRIMES.every((p) => n % p !== 0)) PRIMES.push(n);
const fraction32 = (x: number) => Math.floor((x - Math.floor(x)) * TWO_32) | 0;
const K = Int32Array.from(PRIMES, (p) => fraction32(Math.cbrt(p)));
const H = Int32Array.from(PRIMES.slice(0, 8), (p) => fraction32(Math.sqrt(p)));
const W = new Int32Array(64);

/** The term of an ASCII text of up to 55 bytes (one block with its padding); null for any other. */
function oneBlockTerm(text: string): Term | null {
  const n = text.length;
  if (n > 55) return null;
  W.fill(0, 0, 16);
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c > 0x7f) return null;
    W[i >> 2]! |= c << (24 - 8 * (i & 3));
  }
  W[n >> 2]! |= 0x80 << (24 - 8 * (n & 3));
  W[15] = n * 8;
  for (let t = 16; t < 64; t++) {
    const x = W[t - 15]!;
    const y = W[t - 2]!;
    const s0 = ((x >>> 7) | (x << 25)) ^ ((x >>> 18) | (x << 14)) ^ (x >>> 3);
    const s1 = ((y >>> 17) | (y << 15)) ^ ((y >>> 19) | (y << 13)) ^ (y >>> 10);
    W[t] = (W[t - 16]! + s0 + W[t - 7]! + s1) | 0;
  }
  let a = H[0]!;
  let b = H[1]!;
  let c = H[2]!;
  let d = H[3]!;
  let e = H[4]!;
  let f = H[5]!;
  let g = H[6]!;
  let h = H[7]!;
  for (let t = 0; t < 64; t++) {
    const S1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
    const t1 = (h + S1 + ((e & f) ^ (~e & g)) + K[t]! + W[t]!) | 0;
    const S0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
    const t2 = (S0 + ((a & b) ^ (a & c) ^ (b & c))) | 0;
    h = g;
    g = f;
    f = e;
    e = (d + t1) | 0;
    d = c;
    c = b;
    b = a;
    a = (t1 + t2) | 0;
  }
  return { hi: (H[0]! + a) >>> 0, lo: (H[1]! + b) >>> 0 };
}

export function digestTerm(key: string, offset: number): bigint {
  const { hi, lo } = termOf(key, offset);
  return (BigInt(hi) << 32n) | BigInt(lo);
}

/** The digest as sent: 16 lowercase hex digits. */
export function digestHex(digest: bigint): string {
  return BigInt.asUintN(64, digest).toString(16).padStart(16, '0');
}

export function digestOf(entries: Iterable<{ key: string; offset: number }>): bigint {
  let sum = 0n;
  for (const entry of entries) sum += digestTerm(entry.key, entry.offset);
  return BigInt.asUintN(64, sum);
}

/** A digest mod 2^64 in two 32-bit halves, changed in place: each step carries or borrows, so both stay exact doubles. */
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
