// Compaction of a pre-filled log in a real server child process (STATELOG_SYNC=full)
// through POST /v1/admin/compact: records removed per second (target >= 300,000/s), and
// write p99 while PUTs arrive at a steady rate, during the run / before it (target <= 1.5,
// set for the full size).
// Each run compacts a fresh copy twice: alone (the removal rate), then with the writes.
//   npm run bench -- --only compact          the suite's size: 1,000,000 records
//   npm run bench:compact                    full size: 10,000,000 records over 100,000 keys
// Full-size settings: BENCH_RECORDS, BENCH_KEYS, BENCH_RUNS (default 3), BENCH_WRITES_PER_SEC,
// BENCH_WARMUP_MS, BENCH_BASELINE_MS, BENCH_DIR (scratch space, ~1.5 GB at full size).
import { keyName } from '../../harness/fill-log.js';
import type { Figure, RunSettings } from '../shared/figure.js';
import { envNumber, filledTemplate, httpJson, percentile, round, secondsText, sleep, startStatelog, workingCopy } from '../shared/lib.js';
import { PacedWriter, type WriteSample } from '../shared/paced-writer.js';

interface Scale {
  records: number;
  keys: number;
  runs: number;
  writesPerSecond: number;
  warmupMs: number;
  baselineMs: number;
}

function scaleOf(settings: RunSettings): Scale {
  if (settings.smoke) return { records: 20_000, keys: 200, runs: 1, writesPerSecond: 200, warmupMs: 300, baselineMs: 700 };
  if (!settings.full) return { records: 1_000_000, keys: 10_000, runs: settings.rounds, writesPerSecond: 2_000, warmupMs: 3_000, baselineMs: 5_000 };
  return {
    records: envNumber('BENCH_RECORDS', 10_000_000),
    keys: envNumber('BENCH_KEYS', 100_000),
    runs: envNumber('BENCH_RUNS', 3),
    writesPerSecond: envNumber('BENCH_WRITES_PER_SEC', 2_000),
    warmupMs: envNumber('BENCH_WARMUP_MS', 8_000),
    baselineMs: envNumber('BENCH_BASELINE_MS', 10_000),
  };
}

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
  const db = workingCopy(template, 'compact-work');
  const server = await startStatelog({ STATELOG_DB: db.path });
  try {
    return await work(server.url);
  } finally {
    await server.stop();
    db.dispose();
  }
}

/**
 * Runs a compaction through POST /v1/admin/compact and waits for it. The server closes a
 * connection on which nothing moved for 120 s, so a longer run (full size, with writes,
 * on a busy machine) loses its answer: the run goes on, and its summary is then read
 * from GET /v1/stats once it shows. `endedAt` is when the run ended (performance.now()).
 */
async function compact(url: string): Promise<CompactAnswer & { removedPerSecond: number; endedAt: number }> {
  const requestedAt = performance.now();
  let result: CompactAnswer;
  let endedAt: number;
  try {
    const answer = await httpJson('POST', `${url}/v1/admin/compact`);
    if (answer.status !== 200) throw new Error(`compaction answered ${answer.status}: ${JSON.stringify(answer.body)}`);
    result = answer.body as CompactAnswer;
    endedAt = performance.now();
  } catch (err) {
    if (!(err instanceof Error) || !/socket hang up|ECONNRESET/.test(err.message)) throw err;
    for (const deadline = Date.now() + 3_600_000; ; ) {
      if (Date.now() > deadline) throw new Error('the compaction lost its answer and did not finish within an hour', { cause: err });
      const stats = await httpJson('GET', `${url}/v1/stats`);
      const last = (stats.body as { lastCompaction: (CompactAnswer & { startedAt: number }) | null }).lastCompaction;
      if (last) {
        result = last;
        // The server's clock is this machine's: epoch milliseconds to performance.now().
        endedAt = last.startedAt + last.durationMs - performance.timeOrigin;
        break;
      }
      await sleep(200);
    }
    endedAt = Math.max(requestedAt, endedAt);
  }
  return { ...result, removedPerSecond: Math.round(result.removed / (result.durationMs / 1000)), endedAt };
}

/** The compaction while PUTs arrive at a steady rate: what it does to write latency. */
function withWrites(template: string, scale: Scale) {
  return withServer(template, async (url) => {
    const writer = new PacedWriter(url, scale.writesPerSecond, scale.keys, keyName);
    writer.start();
    let baselineFrom, runFrom, runTo, result;
    try {
      // Long enough for the server's JIT and the client's connection pool to settle.
      await sleep(scale.warmupMs);
      baselineFrom = performance.now();
      await sleep(scale.baselineMs);
      runFrom = performance.now();
      result = await compact(url);
      runTo = result.endedAt;
    } finally {
      await writer.stop();
    }
    const baseline = latency(writer.between(baselineFrom, runFrom));
    const during = latency(writer.between(runFrom, runTo));
    return { ...result, baseline, during, p99Ratio: round(during.p99Ms / baseline.p99Ms) };
  });
}

export const compactFigure: Figure = {
  name: 'compact',
  title: 'Compaction: removal rate, and write p99 while it runs',
  async run(settings) {
    const scale = scaleOf(settings);
    const template = filledTemplate(scale.records, scale.keys, settings.log);
    const runs = [];
    for (let run = 1; run <= scale.runs; run++) {
      const quiet = await withServer(template, compact);
      settings.log(`run ${run}: alone, removed ${quiet.removed.toLocaleString()} in ${secondsText(quiet.durationMs)} s = ${quiet.removedPerSecond.toLocaleString()}/s`);
      const busy = await withWrites(template, scale);
      settings.log(
        `run ${run}: with ${scale.writesPerSecond}/s writes, removed ${busy.removed.toLocaleString()} in ${secondsText(busy.durationMs)} s = ` +
          `${busy.removedPerSecond.toLocaleString()}/s; write p99 ${busy.baseline.p99Ms} ms before, ${busy.during.p99Ms} ms during ` +
          `(x${busy.p99Ratio}); ${busy.during.writes} writes during the run, ${busy.during.failed} failed`,
      );
      runs.push({ run, alone: quiet, withWrites: busy });
    }
    return {
      scale:
        `${scale.records.toLocaleString()} records over ${scale.keys.toLocaleString()} keys (${scale.records / scale.keys} versions a key), ` +
        `PUTs at ${scale.writesPerSecond.toLocaleString()}/s (open loop), ${scale.baselineMs / 1000} s baseline, STATELOG_SYNC=full` +
        (settings.full ? '' : '; full size (10,000,000 records over 100,000 keys): npm run bench:compact'),
      settings: { ...scale, sync: 'full', failedWrites: runs.reduce((n, r) => n + r.withWrites.baseline.failed + r.withWrites.during.failed, 0) },
      metrics: [
        { label: 'records removed, alone', unit: 'records/s', values: runs.map((r) => r.alone.removedPerSecond), target: { op: '>=', value: 300_000 } },
        { label: 'records removed, with writes', unit: 'records/s', values: runs.map((r) => r.withWrites.removedPerSecond) },
        { label: 'write p99 before the run', unit: 'ms', values: runs.map((r) => r.withWrites.baseline.p99Ms) },
        { label: 'write p99 during the run', unit: 'ms', values: runs.map((r) => r.withWrites.during.p99Ms) },
        { label: 'ratio write p99 during / before', unit: '×', values: runs.map((r) => r.withWrites.p99Ratio), target: { op: '<=', value: 1.5 } },
      ],
      details: runs,
    };
  },
};
