// The compaction job on a real store: when a timed run is due, joining, failure
// isolation, stopping at a step boundary, and what it reports.
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CompactionStopped, compactionDue, type CompactionSettings } from '../src/compaction/compactor.js';
import type { LogStore } from '../src/store/log-store.js';
import { keyName } from '../harness/fill-log.js';
import { fileDatabase } from './support/helpers.js';
import { NO_TIMER, allRecords, compactorFor, currentState, keptCounters, write } from './support/store-helpers.js';

// One database for the file, emptied before each test.
const database = fileDatabase();
let store: LogStore;
beforeEach(async () => {
  await database().reset();
  store = await database().openStore();
});
afterEach(async () => {
  await store.close();
});

/** Writes `versions` values to each of `keys` keys at `now`. */
async function writeVersions(keys: number, versions: number, now: number): Promise<void> {
  for (let version = 0; version < versions; version++) {
    for (let key = 0; key < keys; key++) {
      await write(store, [{ op: 'set', key: keyName(key), value: String(version) }], now);
    }
  }
}

/** A real pino logger whose JSON lines are kept for the test to read. */
function recordingLog() {
  const lines: Array<Record<string, unknown>> = [];
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(JSON.parse(chunk.toString()) as Record<string, unknown>);
      done();
    },
  });
  return { log: pino({ level: 'info' }, stream), lines };
}

/** Every key keeps exactly one record (nothing is younger than a lag of 0). */
async function expectFullyCompacted(): Promise<void> {
  const records = await allRecords(store);
  expect(new Set(records.map((r) => r.key)).size).toBe(records.length);
  expect(await keptCounters(store)).toEqual(await database().counted());
}

describe('when a timed run is due', () => {
  const settings: CompactionSettings = { ...NO_TIMER, minDirtyRatio: 0.5, minLagMs: 100, maxLagMs: 1000 };
  const due = (superseded: number, records: number, supersededSince: number | null, now: number) =>
    compactionDue({ superseded, records, supersededSince }, settings, now);

  it('is due at the dirty ratio, or once a record has been superseded for the maximum lag', () => {
    expect(due(50, 100, 0, 100)).toBe('dirty_ratio');
    expect(due(49, 100, 0, 100)).toBeNull();
    expect(due(1, 100, 0, 999)).toBeNull();
    expect(due(1, 100, 0, 1000)).toBe('max_lag');
  });

  it('is not due while nothing could be removed', () => {
    expect(due(0, 100, null, 10_000)).toBeNull();
    // The superseding records are younger than the minimum lag: a run would remove nothing.
    expect(due(90, 100, 950, 1000)).toBeNull();
    expect(due(90, 100, 900, 1000)).toBe('dirty_ratio');
    expect(compactionDue({ superseded: 1, records: 100, supersededSince: 0 }, { ...settings, maxLagMs: 0 }, 1e9)).toBeNull();
  });

  it('reads the backlog from the counters the store keeps', async () => {
    const now = 5_000;
    const compactor = compactorFor(store, settings, { now: () => now });
    await writeVersions(10, 1, 1_000);
    expect(await store.compactionBacklog()).toEqual({ records: 10, superseded: 0, supersededSince: null });
    expect(await compactor.tick()).toBeNull();

    await write(store, [{ op: 'set', key: keyName(0), value: '1' }], 4_500);
    expect(await store.compactionBacklog()).toEqual({ records: 11, superseded: 1, supersededSince: 4_500 });
    // Superseded 500 ms ago: below the ratio and the maximum lag.
    expect(await compactor.tick()).toBeNull();

    const later = compactorFor(store, settings, { now: () => 5_500 });
    expect(await later.tick()).toMatchObject({ trigger: 'max_lag', removed: 1 });
    expect(await store.compactionBacklog()).toEqual({ records: 10, superseded: 0, supersededSince: null });
  });

  it('remembers a lower bound of when records were superseded across a run and a restart', async () => {
    await writeVersions(5, 2, 1_000);
    await writeVersions(5, 1, 2_000);
    await writeVersions(5, 1, 3_000);
    // A lag of 1500 ms at 4000 keeps the writes at 3000 and what they superseded.
    const summary = await compactorFor(store, { minLagMs: 1_500 }, { now: () => 4_000 }).run();
    expect(summary.removed).toBe(10);
    expect(await store.compactionBacklog()).toEqual({ records: 10, superseded: 5, supersededSince: 3_000 });

    await store.close();
    store = await database().openStore();
    // After a restart, SQLite takes the oldest record's time (never later than the
    // truth); PostgreSQL keeps the bound in its meta row.
    const supersededSince = database().kind === 'sqlite' ? 2_000 : 3_000;
    expect(await store.compactionBacklog()).toEqual({ records: 10, superseded: 5, supersededSince });
  });
});

describe('a run', () => {
  it('runs on the timer when the dirty ratio is reached', async () => {
    await writeVersions(20, 3, Date.now());
    const compactor = compactorFor(store, { intervalMs: 10, minDirtyRatio: 0.5 });
    compactor.start();
    await expect.poll(() => compactor.runs, { timeout: 10_000 }).toBe(1);
    expect(compactor.lastCompaction).toMatchObject({ trigger: 'dirty_ratio', removed: 40 });
    await compactor.stop();
    await expectFullyCompacted();
  });

  it('reports what it did, and shrinks the file', async () => {
    await database().reset();
    await database().fillLog({ records: 50_000, keys: 100, deletedKeys: 10, lastTs: 10_000 });
    store = await database().openStore();
    const before = await store.counters();
    const compactor = compactorFor(store, {}, { now: () => 20_000 });
    const summary = await compactor.run();
    expect(summary).toMatchObject({
      trigger: 'admin',
      startedAt: 20_000,
      removed: 50_000 - 90,
      tombstonesRemoved: 10,
      head: 50_000,
      bytesBefore: before.dbBytes,
    });
    // The highest offset among the removed delete markers (all in the last round).
    const horizon = summary.horizon;
    expect(horizon).toBeGreaterThan(50_000 - 100);
    expect(store.position().horizon).toBe(horizon);
    if (database().kind === 'sqlite') {
      // The run gives the file's space back itself. (PostgreSQL's autovacuum makes the
      // space reusable later, and may change the size at any time.)
      expect(summary.bytesAfter).toBeLessThan(summary.bytesBefore / 10);
      expect(summary.bytesAfter).toBe((await store.counters()).dbBytes);
    }
    expect(compactor.lastCompaction).toEqual(summary);
    expect({ runs: compactor.runs, removed: compactor.removed, tombstones: compactor.tombstonesRemoved }).toEqual({
      runs: 1,
      removed: summary.removed,
      tombstones: 10,
    });
    expect(compactor.durationMsTotal).toBe(summary.durationMs);
    await expectFullyCompacted();
  });

  it('joins a run in progress instead of starting another', async () => {
    await writeVersions(50, 4, Date.now());
    const compactor = compactorFor(store, {}, { budget: { maxRows: 10, maxMs: 50 } });
    const first = compactor.run();
    const second = compactor.run();
    expect(compactor.running).toBe(true);
    expect(await compactor.tick()).toBeNull();
    expect(await second).toBe(await first);
    expect(compactor.runs).toBe(1);
    expect(compactor.running).toBe(false);
  });

  it('fails in isolation: logged with its cause, counted, consistent, retried next period', async () => {
    await writeVersions(40, 5, Date.now());
    const valuesBefore = await currentState(store);
    // A real failure inside the database, in the middle of the run.
    const restore = await database().failCompaction('disk on fire', 100);
    const { log, lines } = recordingLog();
    const compactor = compactorFor(store, { minDirtyRatio: 0.2 }, { log, budget: { maxRows: 20, maxMs: 50 } });

    await expect(compactor.run()).rejects.toThrow('disk on fire');
    expect(await compactor.tick()).toBeNull(); // the timer's run fails the same way and does not throw
    expect(compactor.failures).toBe(2);
    expect(compactor.runs).toBe(0);
    expect(compactor.lastCompaction).toBeNull();
    const failure = lines.find((line) => line.level === 50)!;
    expect(failure.msg).toMatch(/compaction failed/);
    expect(failure.err).toMatchObject({ message: 'disk on fire' });
    expect(failure.trigger).toBe('admin');

    // The steps before the failing one stand; the failing one left no trace.
    const counted = await database().counted();
    expect(counted.records).toBeLessThan(200);
    expect(counted.records).toBeGreaterThan(40);
    expect(await keptCounters(store)).toEqual(counted);
    expect(await currentState(store)).toEqual(valuesBefore);

    await restore();
    expect(await compactor.tick()).toMatchObject({ trigger: 'dirty_ratio' });
    expect(compactor.failures).toBe(2);
    await expectFullyCompacted();
    expect(await currentState(store)).toEqual(valuesBefore);
  });

  it('survives a database that is gone: timed runs fail, are logged and counted, and nothing throws', async () => {
    await writeVersions(10, 3, Date.now());
    const { log, lines } = recordingLog();
    const compactor = compactorFor(store, { intervalMs: 10 }, { log });
    await store.close();
    compactor.start();
    await expect.poll(() => compactor.failures, { timeout: 10_000 }).toBeGreaterThanOrEqual(2);
    await compactor.stop();
    expect(compactor.runs).toBe(0);
    const gone = { sqlite: /not open/, postgres: /after calling end on the pool|store is closed/ }[database().kind];
    expect(lines.filter((line) => line.level === 50).every((line) => gone.test(String((line.err as { message: string }).message)))).toBe(true);
    store = await database().openStore();
  });

  it('stops at a step boundary and refuses to start again', async () => {
    await writeVersions(100, 5, Date.now());
    const compactor = compactorFor(store, {}, { budget: { maxRows: 5, maxMs: 50 } });
    const run = compactor.run();
    run.catch(() => {});
    await new Promise((resolve) => setImmediate(resolve));
    await compactor.stop();
    await expect(run).rejects.toBeInstanceOf(CompactionStopped);
    await expect(compactor.run()).rejects.toBeInstanceOf(CompactionStopped);
    expect(compactor.failures).toBe(0);
    const counted = await database().counted();
    expect(counted.records).toBeGreaterThan(100);
    expect(counted.records).toBeLessThan(500);
    expect(await keptCounters(store)).toEqual(counted);
  });

  it('stops when the shutdown signal aborts', async () => {
    await writeVersions(100, 5, Date.now());
    const shutdown = new AbortController();
    const compactor = compactorFor(store, {}, { signal: shutdown.signal, budget: { maxRows: 5, maxMs: 50 } });
    const run = compactor.run();
    run.catch(() => {});
    shutdown.abort();
    await expect(run).rejects.toBeInstanceOf(CompactionStopped);
    await expect(compactor.run()).rejects.toBeInstanceOf(CompactionStopped);
  });
});
