// npm run bench:recovery: what compaction buys a client that rebuilds the state. With
// 100,000 keys x 100 versions, times replaying the whole uncompacted log from offset 0
// against reading the snapshot after compaction (target: >= 50x faster).
// Through the store API (store.readChanges and store.openSnapshot, the reads behind
// GET /v1/changes and GET /v1/snapshot); the client parses every value as it would.
// Settings: BENCH_KEYS, BENCH_VERSIONS, BENCH_RUNS (default 3), BENCH_DIR.
import { rmSync } from 'node:fs';
import { Compactor, DEFAULT_BUDGET } from '../src/compactor.js';
import { SqliteStore } from '../src/store/sqlite-store.js';
import { BENCH_DIR, envNumber, filledTemplate, median, round, saveResults, seconds, workingCopy } from './common.js';

const KEYS = envNumber('BENCH_KEYS', 100_000);
const VERSIONS = envNumber('BENCH_VERSIONS', 100);
const RUNS = envNumber('BENCH_RUNS', 3);
/** The largest page GET /v1/changes serves; the snapshot is read in pages of the same size. */
const CHANGES_PAGE = 10_000;
const SNAPSHOT_PAGE = 10_000;

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

const records = KEYS * VERSIONS;
const db = workingCopy(filledTemplate(records, KEYS), 'recovery-work.db');
const store = new SqliteStore({ path: db, sync: 'normal', idempotencyTtlMs: 60_000 });
try {
  const replay = await timed(RUNS, () => replayFromZero(store));
  console.log(`replay of ${records.toLocaleString()} records from offset 0: ${replay.ms.map(seconds).join(', ')} s`);

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
  console.log(`compaction removed ${compaction.removed.toLocaleString()} records in ${seconds(compaction.durationMs)} s`);

  const snapshot = await timed(Math.max(RUNS, 5), () => readSnapshot(store));
  console.log(`snapshot of ${snapshot.state.size.toLocaleString()} keys after compaction: ${snapshot.ms.map((ms) => ms.toFixed(0)).join(', ')} ms`);

  // Both ways must rebuild the same state, or the comparison means nothing.
  if (replay.state.size !== KEYS || snapshot.state.size !== KEYS) throw new Error('a rebuild missed keys');
  for (const [key, value] of replay.state) {
    if (JSON.stringify(snapshot.state.get(key)) !== JSON.stringify(value)) throw new Error(`${key} differs`);
  }

  const replayMs = median(replay.ms);
  const snapshotMs = median(snapshot.ms);
  const ratio = round(replayMs / snapshotMs, 1);
  const file = saveResults('recovery', {
    keys: KEYS,
    versions: VERSIONS,
    via: 'store API (store.readChanges and store.openSnapshot, pages of 10,000)',
    target: { ratio: 50 },
    medians: { replayMs: round(replayMs), snapshotMs: round(snapshotMs), ratio },
    replayMs: replay.ms.map((ms) => round(ms)),
    snapshotMs: snapshot.ms.map((ms) => round(ms)),
    compaction,
    scratch: BENCH_DIR,
  });
  console.log(
    `\nrebuilding ${KEYS.toLocaleString()} keys: replay from 0 ${seconds(replayMs)} s, snapshot ${snapshotMs.toFixed(0)} ms ` +
      `(medians): ${ratio}x faster (target >= 50x)\nresults: ${file}`,
  );
} finally {
  await store.close();
  for (const suffix of ['', '-wal', '-shm']) rmSync(`${db}${suffix}`, { force: true });
}
