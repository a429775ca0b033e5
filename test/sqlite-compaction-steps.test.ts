// How long a SQLite compaction step holds the event loop: writes wait behind each one,
// so a step must end near its time budget, commit included, however dear its rows are.
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { fillLog, keyName } from '../harness/fill-log.js';
import { SqliteCompactionPass } from '../src/store/sqlite/compaction.js';
import { tempDir } from './support/helpers.js';
import { compactorFor, currentState, write } from './support/store-helpers.js';
import { openSqliteStore } from './support/store-access.js';

const dir = tempDir();
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

/** Times every removal step of the runs inside `work` (the step's whole transaction, on the event loop). */
async function timingRemovalSteps<T>(work: () => Promise<T>): Promise<{ result: T; stepsMs: number[] }> {
  const proto = SqliteCompactionPass.prototype as unknown as { removeStep(this: unknown): void };
  const original = proto.removeStep;
  const stepsMs: number[] = [];
  proto.removeStep = function (this: unknown) {
    const started = performance.now();
    original.call(this);
    stepsMs.push(performance.now() - started);
  };
  try {
    return { result: await work(), stepsMs };
  } finally {
    proto.removeStep = original;
  }
}

describe('compaction steps on SQLite', () => {
  it('a removal step ends near its time budget when every row passes through the rules', async () => {
    const path = join(dir, 'rewritten.db');
    const now = Date.now();
    const keys = 1_000;
    // Every key is written again after the cutoff (the minimum lag keeps the new records
    // out of the run), so none of the filled records goes by range without being read.
    const filled = fillLog(path, { records: 100_000, keys, lastTs: now - 60_000 });
    const store = openSqliteStore(path);
    try {
      for (let key = 0; key < keys; key++) await write(store, [{ op: 'set', key: keyName(key), value: '"again"' }], now);
      const budget = { maxRows: 20_000, maxMs: 0.5 };
      const { result, stepsMs } = await timingRemovalSteps(() => compactorFor(store, { minLagMs: 30_000 }, { now: () => now, budget }).run());
      // Each key keeps its last filled record (the last one older than the lag) and the new one.
      expect(result.removed).toBe(100_000 - keys);
      expect(await currentState(store)).toEqual(new Map([...filled.keys()].map((key) => [key, '"again"'])));
      expect(stepsMs.length).toBeGreaterThan(10);
      // The median, not the longest: a step the scheduler preempted says nothing of its work.
      expect(median(stepsMs), `steps: ${stepsMs.map((ms) => ms.toFixed(2)).join(' ')}`).toBeLessThanOrEqual(1.5 * budget.maxMs);
    } finally {
      await store.close();
    }
  }, 120_000);
});
