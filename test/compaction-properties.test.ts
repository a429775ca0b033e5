// The compactor's guarantees as properties over random write histories, with random
// minimum lag, tombstone retention and step sizes, on a controllable clock. A reference
// model replays the same history and decides independently what a run must remove.
// FC_RUNS sets the number of histories per property (default 100, fast-check's own; 40 on PostgreSQL,
// where the readers' checks after each run take thousands of round trips).
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { LogStore, StoredRecord, WriteOp } from '../src/store/log-store.js';
import { fileDatabase, TEST_STORE } from './support/helpers.js';
import { allRecords, applyRecords, compactorFor, currentState, keptCounters, readSnapshot, write } from './support/store-helpers.js';

const RUNS = Number(process.env.FC_RUNS ?? (TEST_STORE === 'postgres' ? 40 : 100));
const KEYS = ['a', 'b', 'c', 'dir/d', 'dir/é'];

type Command =
  | { kind: 'set'; key: string; value: number }
  | { kind: 'delete'; key: string }
  | { kind: 'batch'; ops: Array<{ key: string; value: number | null }> }
  | { kind: 'wait'; ms: number }
  | { kind: 'snapshot' }
  | { kind: 'compact' };

const key = fc.constantFrom(...KEYS);
const command: fc.Arbitrary<Command> = fc.oneof(
  { weight: 6, arbitrary: fc.record({ kind: fc.constant('set' as const), key, value: fc.integer({ min: 0, max: 99 }) }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('delete' as const), key }) },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('batch' as const),
      ops: fc.array(fc.record({ key, value: fc.option(fc.integer({ min: 0, max: 99 })) }), { minLength: 1, maxLength: 4 }),
    }),
  },
  { weight: 4, arbitrary: fc.record({ kind: fc.constant('wait' as const), ms: fc.integer({ min: 0, max: 30 }) }) },
  { weight: 1, arbitrary: fc.constant({ kind: 'snapshot' as const }) },
  { weight: 1, arbitrary: fc.constant({ kind: 'compact' as const }) },
);

const scenario = fc.record({
  commands: fc.array(command, { minLength: 1, maxLength: 60 }),
  /** Commands run between the steps of each run, as the HTTP writer interleaves. */
  during: fc.array(fc.oneof(command, command, fc.constant({ kind: 'step' as const })), { maxLength: 20 }),
  minLagMs: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 60 })),
  tombstoneRetentionMs: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 120 })),
  stepRows: fc.integer({ min: 1, max: 40 }),
});
type Scenario = typeof scenario extends fc.Arbitrary<infer T> ? T : never;

// One database for the file, emptied before each history.
const database = fileDatabase();

/** The history as written (never compacted), and what compaction must have left. */
class Model {
  readonly history: StoredRecord[] = [];
  /** Offsets the reference compaction has removed. */
  readonly removed = new Set<number>();
  horizon = 0;

  append(record: StoredRecord): void {
    this.history.push(record);
  }

  get head(): number {
    return this.history.length;
  }

  survivors(): StoredRecord[] {
    return this.history.filter((record) => !this.removed.has(record.offset));
  }

  stateAt(offset: number): Map<string, string> {
    return applyRecords(
      new Map(),
      this.history.filter((record) => record.offset <= offset),
    );
  }

  isLive(key: string): boolean {
    return this.stateAt(this.head).has(key);
  }

  /** The highest offset committed by `ts` among the first `head` records. */
  cutoff(head: number, ts: number): number {
    return this.history.filter((r) => r.offset <= head && r.ts <= ts).at(-1)?.offset ?? 0;
  }

  /** The rules, stated directly: what a run at `now` removes. */
  compact(now: number, minLagMs: number, retentionMs: number): void {
    const survivors = this.survivors();
    const oldEnough = now - minLagMs;
    const tombstoneOldEnough = now - Math.max(minLagMs, retentionMs);
    for (const record of survivors) {
      const later = survivors.filter((other) => other.key === record.key && other.offset > record.offset);
      const supersededByOld = later.some((other) => other.ts <= oldEnough);
      const expiredTombstone = later.length === 0 && record.op === 'delete' && record.ts <= tombstoneOldEnough;
      if (supersededByOld || expiredTombstone) this.removed.add(record.offset);
      if (expiredTombstone) this.horizon = Math.max(this.horizon, record.offset);
    }
  }
}

async function applyCommand(store: LogStore, model: Model, cmd: Command, now: number): Promise<void> {
  const ops: WriteOp[] =
    cmd.kind === 'set'
      ? [{ op: 'set', key: cmd.key, value: String(cmd.value) }]
      : cmd.kind === 'delete'
        ? [{ op: 'delete', key: cmd.key }]
        : cmd.kind === 'batch'
          ? cmd.ops.map((op) => (op.value === null ? { op: 'delete', key: op.key } : { op: 'set', key: op.key, value: String(op.value) }))
          : [];
  // The model decides whether the request is refused: a delete of a key with no live value.
  const live = new Set(model.stateAt(model.head).keys());
  let refused = false;
  for (const op of ops) {
    if (op.op === 'delete' && !live.has(op.key)) refused = true;
    if (op.op === 'delete') live.delete(op.key);
    else live.add(op.key);
  }
  const outcome = await write(store, ops, now);
  expect(outcome.ok).toBe(!refused);
  if (!outcome.ok) return;
  ops.forEach((op, index) => {
    const offset = model.head + 1;
    expect(outcome.applied[index]!.offset).toBe(offset);
    model.append({ offset, key: op.key, op: op.op === 'delete' ? 'delete' : 'set', value: op.op === 'set' ? op.value : null, ts: now });
  });
}

/** What every reader sees after a run, whatever ran during it. */
async function checkReaders(store: LogStore, model: Model): Promise<void> {
  // Current values unchanged.
  const current = model.stateAt(model.head);
  expect(await currentState(store)).toEqual(current);
  for (const k of KEYS) expect((await store.get(k))?.value ?? null).toBe(current.get(k) ?? null);

  // Counters exact; head never moves back; the horizon is stored as the model has it.
  expect(await keptCounters(store)).toEqual(await database().counted());
  expect(store.position()).toMatchObject({ head: model.head, horizon: model.horizon });

  // From any offset at or above the horizon, the state at that offset plus the changes
  // after it is the current state. Below it a removed delete marker may be missing,
  // which is why the HTTP layer answers 410 exactly when after < horizon.
  for (let offset = model.horizon; offset <= model.head; offset++) {
    const changes = await allRecords(store, 3, offset);
    expect(changes.every((r) => r.offset > offset)).toBe(true);
    expect(applyRecords(model.stateAt(offset), changes)).toEqual(current);
  }
}

/**
 * The guarantees of a run that started at `now` with `before` in the log and offsets up
 * to `headAtStart`; records written during the run are not its business.
 */
function checkGuarantees(survivors: StoredRecord[], before: StoredRecord[], headAtStart: number, now: number, s: Scenario): void {
  const oldEnough = now - s.minLagMs;
  for (const k of KEYS) {
    const oldBefore = before.filter((r) => r.key === k && r.offset <= headAtStart && r.ts <= oldEnough);
    const oldAfter = survivors.filter((r) => r.key === k && r.offset <= headAtStart && r.ts <= oldEnough);
    const expiredDelete = oldBefore.at(-1)?.op === 'delete' && oldAfter.length === 0;
    // Each key keeps exactly one record older than the minimum lag (none once its
    // expired delete marker went).
    expect(oldAfter.length).toBe(oldBefore.length === 0 || expiredDelete ? 0 : 1);
  }
  // Records younger than the minimum lag all survive, and so do the delete markers
  // younger than the retention that were still their key's latest record (a superseded
  // one is just a superseded record).
  const offsets = new Set(survivors.map((r) => r.offset));
  for (const record of before) {
    const latest = before.every((r) => r.key !== record.key || r.offset <= record.offset);
    if (record.ts > oldEnough) expect(offsets.has(record.offset)).toBe(true);
    if (latest && record.op === 'delete' && record.ts > now - s.tombstoneRetentionMs) {
      expect(offsets.has(record.offset)).toBe(true);
    }
  }
}

/**
 * With writes between its steps, the run's choices depend on when each write landed, so
 * each removal is checked against the rules instead of a fixed answer, and the model
 * adopts what the store did.
 */
function adoptConcurrentRun(model: Model, survivors: StoredRecord[], headAtStart: number, now: number, s: Scenario, horizon: number): void {
  const cutoff = model.cutoff(headAtStart, now - s.minLagMs);
  const kept = new Set(survivors.map((r) => r.offset));
  let expectedHorizon = model.horizon;
  for (const record of model.survivors().filter((r) => !kept.has(r.offset))) {
    const supersededByOld = model.history.some((r) => r.key === record.key && r.offset > record.offset && r.offset <= cutoff);
    if (supersededByOld) continue;
    // Otherwise only an expired delete marker that was its key's latest record may go.
    expect(record.op).toBe('delete');
    expect(record.ts).toBeLessThanOrEqual(now - Math.max(s.minLagMs, s.tombstoneRetentionMs));
    expectedHorizon = Math.max(expectedHorizon, record.offset);
  }
  for (const record of model.survivors()) if (!kept.has(record.offset)) model.removed.add(record.offset);
  expect(horizon).toBe(expectedHorizon);
  model.horizon = expectedHorizon;
}

async function runScenario(s: Scenario, concurrent: boolean): Promise<void> {
  await database().reset();
  let store = await database().openStore();
  let clock = 1_000_000;
  const model = new Model();
  const budget = { maxRows: s.stepRows, maxMs: 10_000 };
  const policy = () => ({ now: clock, minLagMs: s.minLagMs, tombstoneRetentionMs: s.tombstoneRetentionMs });
  const snapshots: Array<{ offset: number; state: Map<string, string> }> = [];

  const perform = async (cmd: Command): Promise<void> => {
    if (cmd.kind === 'wait') clock += cmd.ms;
    else if (cmd.kind === 'snapshot') {
      const snapshot = await readSnapshot(store, 2);
      expect(snapshot.state).toEqual(model.stateAt(snapshot.offset));
      snapshots.push(snapshot);
    } else if (cmd.kind !== 'compact') await applyCommand(store, model, cmd, clock);
  };

  /** A run driven step by step, with the `during` commands between the steps. */
  const compactWithWrites = async (): Promise<number> => {
    const pass = await store.startCompaction(policy(), budget);
    const queue = [...s.during];
    while (await pass.step()) {
      for (let cmd = queue.shift(); cmd && cmd.kind !== 'step'; cmd = queue.shift()) {
        if (cmd.kind !== 'compact') await perform(cmd);
      }
    }
    pass.close();
    return pass.removed;
  };

  try {
    for (const cmd of [...s.commands, { kind: 'compact' } as const]) {
      if (cmd.kind !== 'compact') {
        await perform(cmd);
        continue;
      }
      const now = clock;
      const before = model.survivors();
      const headAtStart = model.head;
      let removed: number;
      if (concurrent) {
        removed = await compactWithWrites();
        const survivors = await allRecords(store, 7);
        // Nothing but removals: offsets, order and contents of the rest unchanged.
        expect(survivors).toEqual(model.survivors().filter((r) => survivors.some((x) => x.offset === r.offset)));
        adoptConcurrentRun(model, survivors, headAtStart, now, s, store.position().horizon);
      } else {
        removed = (await compactorFor(store, policy(), { now: () => clock, budget }).run()).removed;
        model.compact(now, s.minLagMs, s.tombstoneRetentionMs);
      }
      // Records written during the run lie past its cutoff: only earlier ones go.
      expect(removed).toBe(before.length - model.survivors().filter((r) => r.offset <= headAtStart).length);
      const survivors = await allRecords(store, 7);
      // Exactly what the rules remove, and nothing else: offsets, order and contents unchanged.
      expect(survivors).toEqual(model.survivors());
      checkGuarantees(survivors, before, headAtStart, now, s);
      await checkReaders(store, model);
      // A client holding an earlier snapshot resumes from its offset when that is at
      // or above the horizon.
      for (const snapshot of snapshots.filter((snap) => snap.offset >= model.horizon)) {
        expect(applyRecords(new Map(snapshot.state), await allRecords(store, 5, snapshot.offset))).toEqual(
          model.stateAt(model.head),
        );
      }
    }

    // The horizon and the counters are stored; offsets are never reused.
    await store.close();
    store = await database().openStore();
    expect(store.position()).toMatchObject({ head: model.head, horizon: model.horizon });
    expect(await keptCounters(store)).toEqual(await database().counted());
    const next = await write(store, [{ op: 'set', key: 'a', value: '1' }], clock);
    expect(next.ok && next.applied[0]!.offset).toBe(model.head + 1);
  } finally {
    await store.close();
  }
}

describe('compaction guarantees over random histories', () => {
  it('removes exactly what the rules say and keeps every reader correct', async () => {
    await fc.assert(
      fc.asyncProperty(scenario, (s) => runScenario(s, false)),
      { numRuns: RUNS },
    );
  }, 600_000);

  it('keeps them with writes, deletes and snapshots between the steps of a run', async () => {
    await fc.assert(
      fc.asyncProperty(scenario, (s) => runScenario(s, true)),
      { numRuns: RUNS },
    );
  }, 600_000);
});
