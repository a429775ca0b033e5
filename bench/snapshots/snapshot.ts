// The snapshot figure (npm run bench:snapshot, and part of npm run bench): a log of
// 1,000,000 live keys with small JSON values, loaded by direct SQL, served by a real
// server process; a client in a process of its own reads the whole snapshot. Reports keys/s and
// the server's peak RSS growth over its idle RSS, for several rounds (a fresh server
// each). Targets: >= 1,000,000 keys/s and <= 32 MB growth. Option (environment): KEYS.
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { seedLiveKeys } from '../../harness/seed-db.js';
import type { Figure } from '../shared/figure.js';
import { eachRun, mb, type ServerProcess } from '../shared/server-process.js';

interface Run {
  keys: number;
  bytes: number;
  seconds: number;
  keysPerSecond: number;
  idleRssMb: number;
  peakRssGrowthMb: number;
  /** CPU the reading client used: it shares the machine with the server. */
  clientCpuSeconds: number;
  /** The machine's 1-minute load average when the run ended (it has two cores). */
  loadAverage: number;
}

export interface SnapshotRead {
  status: number;
  lines: number;
  bytes: number;
  /** The last line (the trailer of a whole snapshot). */
  last: string;
  firstByteSeconds: number;
  seconds: number;
  /** The reading process's CPU time. */
  cpuSeconds: number;
}

/** Reads a whole snapshot in a process of its own (bench/snapshots/snapshot-reader.mjs). */
export function readSnapshot(base: string, query = ''): Promise<SnapshotRead> {
  return new Promise((resolve, reject) => {
    const reader = fileURLToPath(new URL('./snapshot-reader.mjs', import.meta.url));
    execFile(process.execPath, [reader, `${base}/v1/snapshot${query}`], { maxBuffer: 1 << 20 }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`the snapshot reader failed: ${stderr || err.message}`));
      const read = JSON.parse(stdout) as SnapshotRead;
      if (read.status !== 200) return reject(new Error(`snapshot answered ${read.status}`));
      resolve(read);
    });
  });
}

async function measure(server: ServerProcess, keys: number): Promise<Run> {
  // Warm up the code paths on a tiny snapshot, then settle.
  await readSnapshot(server.base, '?prefix=warm-up');
  await new Promise((resolve) => setTimeout(resolve, 500));
  const idle = server.rss();
  let peak = idle;
  const sampler = setInterval(() => (peak = Math.max(peak, server.rss())), 5);

  const { lines, bytes, last, seconds, cpuSeconds } = await readSnapshot(server.base);
  clearInterval(sampler);
  peak = Math.max(peak, server.rss());

  const trailer = JSON.parse(last) as { end: boolean; count: number };
  if (!trailer.end || trailer.count !== keys || lines !== keys + 1) {
    throw new Error(`incomplete snapshot: ${lines} lines, trailer ${last}`);
  }
  return {
    keys,
    bytes,
    seconds: Math.round(seconds * 1000) / 1000,
    keysPerSecond: Math.round(keys / seconds),
    idleRssMb: mb(idle),
    peakRssGrowthMb: mb(peak - idle),
    clientCpuSeconds: Math.round(cpuSeconds * 1000) / 1000,
    loadAverage: loadavg()[0]!,
  };
}

export const snapshotFigure: Figure = {
  name: 'snapshot',
  title: 'Snapshot of 1,000,000 live keys read whole: keys/s and the server\'s RSS growth',
  async run(settings) {
    const keys = Number(process.env.KEYS ?? (settings.smoke ? 2_000 : 1_000_000));
    const dir = mkdtempSync(join(tmpdir(), 'statelog-bench-'));
    try {
      const dbPath = join(dir, 'statelog.db');
      const seeding = performance.now();
      seedLiveKeys(dbPath, { count: keys, value: (i) => `{"n":${i},"name":"user ${i}","active":${i % 2 === 0}}` });
      settings.log(`loaded ${keys} keys in ${Math.round(performance.now() - seeding)} ms`);
      const runs = await eachRun(
        settings.rounds,
        () => ({ STATELOG_DB: dbPath }),
        (server) => measure(server, keys),
        (run) =>
          `${run.keysPerSecond} keys/s (${run.seconds} s, ${mb(run.bytes)} MB), ` +
          `peak RSS growth ${run.peakRssGrowthMb} MB, client CPU ${run.clientCpuSeconds} s; load ${run.loadAverage.toFixed(1)}`,
      );
      return {
        scale: `${keys} live keys with values of about 45 bytes, read whole by one client; a fresh server each round`,
        settings: { keys },
        metrics: [
          { label: 'snapshot read', unit: 'keys/s', values: runs.map((r) => r.keysPerSecond), target: { op: '>=', value: 1_000_000 } },
          { label: 'server peak RSS growth', unit: 'MB', values: runs.map((r) => r.peakRssGrowthMb), target: { op: '<=', value: 32 } },
          { label: 'server idle RSS', unit: 'MB', values: runs.map((r) => r.idleRssMb) },
        ],
        details: { runs },
      };
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
};
