// What compaction buys a client that rebuilds the state: replaying the whole uncompacted
// log from offset 0 against reading the snapshot after compaction (target: >= 50x faster).
// Through the store API (store.readChanges and store.openSnapshot, the reads behind
// GET /v1/changes and GET /v1/snapshot); the client parses every value as it would.
//   npm run bench -- --only recovery      the suite's size: 10,000 keys x 100 versions
//   npm run bench:recovery                full size: 100,000 keys x 100 versions
// Full-size settings: BENCH_KEYS, BENCH_VERSIONS, BENCH_RUNS (default 3), BENCH_DIR.
import { Compactor, DEFAULT_BUDGET } from '../../src/compaction/compactor.js';
import { SqliteStore } from '../../src/store/sqlite/store.js';
import type { Figure, RunSettings } from '../shared/figure.js';
import { envNumber, filledTemplate, median, secondsText, workingCopy } from '../shared/lib.js';

/** The largest page GET /v1/changes serves. */
const CHANGES_PAGE = 10_000;
const SNAPSHOT_PAGE = 1_000;

type State = Map<string, unknown>;

async function replayFromZero(store: SqliteStore): Promise<State> {
  const state: State = new Map();
  let after = 0;
  for (;;) {
    const page = await store.readChanges({ after, prefix: '', limit: CHANGES_PAGE });
    for (const record of page.records) {
      if (record.op === 'set') state.set(record.key, JSON.parse(record.value!));
      else state.delete(record.key);
    }
    if (page.records.length < CHANGES_PAGE) return state;
    after = page.records[page.records.length - 1]!.offset;
  }
}

async function readSnapshot(store: SqliteStore): Promise<State> {
  const state: State = new Map();
  const snapshot = await store.openSnapshot('');
  try {
    for (let page = await snapshot.nextJson('entry', SNAPSHOT_PAGE); page.length > 0; page = await snapshot.nextJson('entry', SNAPSHOT_PAGE)) {
      for (const line of page) {
        const entry = JSON.parse(line) as { key: string; value: unknown };
        state.set(entry.key, entry.value);
      }
    }
  } finally {
    snapshot.close();
  }
  return state;
}

async function timed(times: number, rebuild: () => Promise<State>): Promise<{ ms: number[]; state: State }> {
  const ms: number[] = [];
  let state: State = new Map();
  for (let i = 0; i < times; i++) {
    const started = performance.now();
    state = await rebuild();
    ms.push(performance.now() - started);
  }
  return { ms, state };
}

function scaleOf(settings: RunSettings) {
  if (settings.smoke) return { keys: 200, versions: 20, runs: 1 };
  if (!settings.full) return { keys: 10_000, versions: 100, runs: settings.rounds };
  return { keys: envNumber('BENCH_KEYS', 100_000), versions: envNumber('BENCH_VERSIONS', 100), runs: envNumber('BENCH_RUNS', 3) };
}

export const recoveryFigure: Figure = {
  name: 'recovery',
  title: 'Recovery: replay of the whole log against a snapshot after compaction',
  async run(settings) {
    const { keys, versions, runs } = scaleOf(settings);
    const records = keys * versions;
    const db = workingCopy(filledTemplate(records, keys, settings.log), 'recovery-work');
    const store = new SqliteStore({ path: db.path, sync: 'normal', idempotencyTtlMs: 60_000 });
    try {
      const replay = await timed(runs, () => replayFromZero(store));
      settings.log(`replay of ${records.toLocaleString()} records from offset 0: ${replay.ms.map(secondsText).join(', ')} s`);
      const compactor = new Compactor({
        intervalMs: 0,
        minDirtyRatio: 0.5,
        minLagMs: 0,
        maxLagMs: 0,
        tombstoneRetentionMs: 0,
        store,
        log: { info() {}, error() {} },
        budget: DEFAULT_BUDGET,
      });
      const compaction = await compactor.run();
      settings.log(`compaction removed ${compaction.removed.toLocaleString()} records in ${secondsText(compaction.durationMs)} s`);
      const snapshot = await timed(Math.max(runs, 5), () => readSnapshot(store));
      settings.log(`snapshot of ${snapshot.state.size.toLocaleString()} keys after compaction: ${snapshot.ms.map((ms) => ms.toFixed(0)).join(', ')} ms`);

      // Both ways must rebuild the same state, or the comparison means nothing.
      if (replay.state.size !== keys || snapshot.state.size !== keys) throw new Error('a rebuild missed keys');
      for (const [key, value] of replay.state) {
        if (JSON.stringify(snapshot.state.get(key)) !== JSON.stringify(value)) throw new Error(`${key} differs`);
      }
      // Each replay against the median snapshot: one ratio a run.
      const snapshotMs = median(snapshot.ms);
      return {
        scale:
          `${keys.toLocaleString()} keys × ${versions} versions (${records.toLocaleString()} records), through the store API` +
          (settings.full ? '' : '; full size (100,000 keys × 100 versions): npm run bench:recovery'),
        settings: { keys, versions, runs, via: 'store.readChanges pages of 10,000; store.openSnapshot pages of 1,000' },
        metrics: [
          { label: 'replay from offset 0', unit: 'ms', values: replay.ms },
          { label: 'snapshot after compaction', unit: 'ms', values: snapshot.ms },
          { label: 'ratio replay / snapshot', unit: '×', values: replay.ms.map((ms) => ms / snapshotMs), target: { op: '>=', value: 50 } },
        ],
        details: { replayMs: replay.ms, snapshotMs: snapshot.ms, compaction },
      };
    } finally {
      await store.close();
      db.dispose();
    }
  },
};
