// The lineage rules alone: when a reader's copy of the log is known to agree with it, and from
// which offset it may differ when a failover lost records it was served.
import { describe, expect, it } from 'vitest';
import { servedGeneration, divergedFrom, knowsGeneration, parseGenerationToken, parseLineage } from '../src/contract/lineage.js';

const token = (text: string) => parseGenerationToken(text)!;

describe('lineage', () => {
  const one = '1-aa:1';
  const two = '1-aa:1,2-bb:6';

  it('parses generations, oldest first, and names the current one', () => {
    expect(parseLineage(two)).toEqual([
      { n: 1, id: 'aa', start: 1 },
      { n: 2, id: 'bb', start: 6 },
    ]);
    expect(servedGeneration(two, 9)).toBe('2-bb');
    expect(servedGeneration(two, 6)).toBe('2-bb');
    expect(servedGeneration(one, 9)).toBeUndefined();
    expect(() => parseLineage('1-aa')).toThrow('malformed');
    expect(parseGenerationToken('0-aa')).toBeNull();
    expect(parseGenerationToken('2-XY')).toBeNull();
  });

  it('names a reader by the generation of its last record, not by a newer one that has none of its records yet', () => {
    // Generation 2 began at 6 with an append that a failover may still lose: a reader served up
    // to 5 is of generation 1, and stays in agreement with a history whose generation 2 differs.
    expect(servedGeneration(two, 5)).toBe('1-aa');
    expect(divergedFrom(5, token(servedGeneration(two, 5)!), '1-aa:1,2-cc:6', 5)).toBeNull();
  });

  it('agrees with a reader whose records all precede the next generation', () => {
    expect(divergedFrom(5, token('1-aa'), two, 9)).toBeNull();
    expect(divergedFrom(9, token('2-bb'), two, 9)).toBeNull();
  });

  it('finds where a reader of a lost branch differs', () => {
    // Served 6 and 7 under generation 1; the new history began generation 2 at 6.
    expect(divergedFrom(7, token('1-aa'), two, 9)).toBe(6);
    // The new primary has not written yet: what the reader holds past its head was never written there.
    expect(divergedFrom(7, token('1-aa'), one, 5)).toBe(6);
    // A generation the log never had (a branch lost whole, begun at 6 here).
    expect(divergedFrom(8, token('2-cc'), two, 9)).toBe(6);
  });

  it('tells a newer generation learnt elsewhere from one it lacks', () => {
    expect(knowsGeneration(one, token('2-bb'))).toBe(false);
    expect(knowsGeneration(two, token('2-bb'))).toBe(true);
  });
});
