// DigestSum, the write path's digest in two 32-bit halves, against the BigInt definition
// (digestTerm, digestOf): every carry and borrow of random adds and subtracts, and the
// extreme terms that carry across both halves.
import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { DigestSum, digestHex, digestTerm, termOf, type Term } from '../src/contract/digest.js';

const halves = (value: bigint): Term => ({ hi: Number(value >> 32n), lo: Number(value & 0xffffffffn) });
const u64 = fc.bigInt({ min: 0n, max: 2n ** 64n - 1n });

describe('DigestSum', () => {
  it('adds and subtracts terms mod 2^64 as BigInt does', () => {
    fc.assert(
      fc.property(u64, fc.array(fc.record({ add: fc.boolean(), term: fc.oneof(u64, fc.constantFrom(0n, 1n, 2n ** 32n - 1n, 2n ** 32n, 2n ** 64n - 1n)) }), { maxLength: 50 }), (start, steps) => {
        const sum = DigestSum.fromHex(digestHex(start));
        let expected = start;
        for (const step of steps) {
          if (step.add) sum.add(halves(step.term));
          else sum.subtract(halves(step.term));
          expected = BigInt.asUintN(64, step.add ? expected + step.term : expected - step.term);
          expect(sum.hex()).toBe(digestHex(expected));
        }
      }),
      { numRuns: 300 },
    );
  });

  it('carries and borrows at the exact edges of the low half', () => {
    const sum = DigestSum.fromHex('00000000ffffffff');
    sum.add({ hi: 0, lo: 1 });
    expect(sum.hex()).toBe('0000000100000000');
    sum.subtract({ hi: 0, lo: 1 });
    expect(sum.hex()).toBe('00000000ffffffff');
    sum.add({ hi: 0xffffffff, lo: 1 });
    expect(sum.hex()).toBe('0000000000000000');
    sum.subtract({ hi: 0, lo: 1 });
    expect(sum.hex()).toBe('ffffffffffffffff');
  });

  it('hashes short ASCII texts in JavaScript exactly as node:crypto does, and longer or other texts too', () => {
    const reference = (key: string, offset: number) => createHash('sha256').update(`${offset}:${key}`, 'utf8').digest().readBigUInt64BE(0);
    const key = fc.oneof(fc.string({ maxLength: 70 }), fc.string({ unit: 'grapheme', maxLength: 30 }), fc.constantFrom('', 'é', 'k'.repeat(53), 'k'.repeat(54), 'k'.repeat(38)));
    fc.assert(
      fc.property(key, fc.oneof(fc.nat(), fc.constant(Number.MAX_SAFE_INTEGER)), (k, offset) => {
        expect(digestTerm(k, offset)).toBe(reference(k, offset));
      }),
      { numRuns: 2000 },
    );
  });

  it('takes the terms of the definition, and a copy does not move with its original', () => {
    expect(halves(digestTerm('user_1', 42))).toEqual(termOf('user_1', 42));
    // The first 8 bytes of SHA-256("1:a"), as the definition reads them.
    expect(digestTerm('a', 1).toString(16).padStart(16, '0')).toBe('4162fddd39a3e422');
    const sum = new DigestSum();
    const copy = sum.copy();
    sum.add(termOf('a', 1));
    expect(sum.hex()).toBe('4162fddd39a3e422');
    expect(copy.hex()).toBe('0000000000000000');
  });
});
