// npm run bench:compact: compacts a log of 10,000,000 records over 100,000 keys in a real
// server child process (STATELOG_SYNC=full) through POST /v1/admin/compact, while HTTP
// PUTs arrive at 2,000/s. Reports records removed per second (target >= 300,000/s) and
// write p99 during the run / write p99 before it (target <= 2).
// Each run compacts a fresh copy twice: alone (the removal rate), then with the writes.
// Settings: BENCH_RECORDS, BENCH_KEYS, BENCH_RUNS (default 3), BENCH_WRITES_PER_SEC,
// BENCH_WARMUP_MS, BENCH_BASELINE_MS, BENCH_DIR (scratch space, ~1.5 GB).
import { rmSync } from 'node:fs';
import { startChildServer } from '../test/child-server.js';
import { keyName } from '../test/fill-log.js';
import { BENCH_DIR, envNumber, filledTemplate, httpJson, median, percentile, round, saveResults, seconds, sleep, workingCopy } from './common.js';
import { PacedWriter, type WriteSample } from './paced-writer.js';

const RECORDS = envNumber('BENCH_RECORDS', 10_000_000);
const KEYS = envNumber('BENCH_KEYS', 100_000);
const RUNS = envNumber('BENCH_RUNS', 3);
const WRITES_PER_SEC = envNumber('BENCH_WRITES_PER_SEC', 2_000);
const BASELINE_MS = envNumber('BENCH_BASELINE_MS', 10_000);
const WARMUP_MS = envNumber('BENCH_WARMUP_MS', 8_000);

interface CompactAnswer {
  removed: number;
  tombstonesRemoved: number;
  durationMs: number;
  horizon: number;
  head: number;
}

function latency(samples: WriteSample[]) {
  const ms = samples.map((s) => s.ms);
  return {
    writes: samples.length,
    failed: samples.filter((s) => s.status !== 200).length,
    p50Ms: round(percentile(ms, 50)),
    p99Ms: round(percentile(ms, 99)),
    maxMs: round(percentile(ms, 100)),
  };
}

/** Runs `work` against a server on a fresh copy of the log. */
async function withServer<T>(template: string, work: (url: string) => Promise<T>): Promise<T> {
  const db = workingCopy(template, 'compact-work.db');
  const server = await startChildServer({ STATELOG_DB: db, STATELOG_COMPACT_INTERVAL_MS: '0', STATELOG_SYNC: 'full' });
  try {
    return await work(server.url);
  } finally {
    await server.kill('SIGTERM');
    for (const suffix of ['', '-wal', '-shm']) rmSync(`${db}${suffix}`, { force: true });
  }
}

async function compact(url: string): Promise<CompactAnswer & { removedPerSecond: number }> {
  const answer = await httpJson('POST', `${url}/v1/admin/compact`);
  if (answer.status !== 200) throw new Error(`compaction answered ${answer.status}: ${JSON.stringify(answer.body)}`);
  const result = answer.body as CompactAnswer;
  return { ...result, removedPerSecond: Math.round(result.removed / (result.durationMs / 1000)) };
}

/** The compaction on its own: how fast records go. */
function alone(template: string) {
  return withServer(template, compact);
}

/** The compaction while PUTs arrive at WRITES_PER_SEC: what it does to write latency. */
function withWrites(template: string) {
  return withServer(template, async (url) => {
    const writer = new PacedWriter(url, WRITES_PER_SEC, KEYS, keyName);
    writer.start();
    let baselineFrom, runFrom, runTo, result;
    try {
      // Long enough for the server's JIT and the client's connection pool to settle.
      await sleep(WARMUP_MS);
      baselineFrom = performance.now();
      await sleep(BASELINE_MS);
      runFrom = performance.now();
      result = await compact(url);
      runTo = performance.now();
    } finally {
      await writer.stop();
    }
    const baseline = latency(writer.between(baselineFrom, runFrom));
    const during = latency(writer.between(runFrom, runTo));
    return { ...result, baseline, during, p99Ratio: round(during.p99Ms / baseline.p99Ms) };
  });
}

const template = filledTemplate(RECORDS, KEYS);
const runs = [];
for (let run = 1; run <= RUNS; run++) {
  const quiet = await alone(template);
  console.log(
    `run ${run}: alone, removed ${quiet.removed.toLocaleString()} in ${seconds(quiet.durationMs)} s = ` +
      `${quiet.removedPerSecond.toLocaleString()}/s`,
  );
  const busy = await withWrites(template);
  console.log(
    `run ${run}: with ${WRITES_PER_SEC}/s writes, removed ${busy.removed.toLocaleString()} in ${seconds(busy.durationMs)} s = ` +
      `${busy.removedPerSecond.toLocaleString()}/s; write p99 ${busy.baseline.p99Ms} ms before, ${busy.during.p99Ms} ms during ` +
      `(x${busy.p99Ratio}); ${busy.during.writes} writes during the run, ${busy.during.failed} failed`,
  );
  runs.push({ run, alone: quiet, withWrites: busy });
}

const summary = {
  removedPerSecond: median(runs.map((r) => r.alone.removedPerSecond)),
  removedPerSecondWithWrites: median(runs.map((r) => r.withWrites.removedPerSecond)),
  writeP99BaselineMs: median(runs.map((r) => r.withWrites.baseline.p99Ms)),
  writeP99DuringMs: median(runs.map((r) => r.withWrites.during.p99Ms)),
  p99Ratio: median(runs.map((r) => r.withWrites.p99Ratio)),
};
const file = saveResults('compact', {
  records: RECORDS,
  keys: KEYS,
  writesPerSecond: WRITES_PER_SEC,
  sync: 'full',
  targets: { removedPerSecond: 300_000, p99Ratio: 2 },
  medians: summary,
  runs,
  scratch: BENCH_DIR,
});
console.log(
  `\nmedians of ${RUNS} runs: ${summary.removedPerSecond.toLocaleString()} records removed/s (target >= 300,000); ` +
    `write p99 ${summary.writeP99BaselineMs} ms without compaction, ${summary.writeP99DuringMs} ms during, ` +
    `ratio ${summary.p99Ratio} (target <= 2)\nresults: ${file}`,
);
