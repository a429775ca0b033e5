// The stalled-reader figure (part of npm run bench): how large the SQLite WAL grows while
// writers add about 2 MB/s and a reader does not read. Two sides, each on a fresh server
// over the same seeded file:
//   spooled   a GET /v1/snapshot that reads its first chunk and stops (served from its
//             spool file: no read transaction is left open);
//   held      a read transaction held open on its own connection for the whole run, as a
//             snapshot was served before spooling (straight from its transaction).
// The WAL's size is sampled every second. Target: the spooled side's peak stays within
// twice journal_size_limit (64 MiB). Options (environment): WAL_BENCH_SECONDS (90), KEYS (20,000).
import http from 'node:http';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { seedLiveKeys } from '../../harness/seed-db.js';
import type { Figure } from '../shared/figure.js';
import { sleep } from '../shared/lib.js';
import { mb, startServer } from '../shared/server-process.js';

type Side = 'spooled' | 'held';

interface Run {
  side: Side;
  seconds: number;
  writtenMb: number;
  peakWalMb: number;
  finalWalMb: number;
  /** The WAL's size at each second. */
  samplesMb: number[];
}

/** 16 KiB values, 128 a second: about 2 MB/s. */
const VALUE = JSON.stringify({ value: 'w'.repeat(16 * 1024) });
const PUTS_PER_SECOND = 128;

function walBytes(dbPath: string): number {
  try {
    return statSync(`${dbPath}-wal`).size;
  } catch {
    return 0;
  }
}

/** A snapshot read up to its first chunk and then left unread; destroy() ends it. */
function stalledSnapshot(base: string): Promise<http.ClientRequest> {
  return new Promise((resolve, reject) => {
    const request = http.get(`${base}/v1/snapshot`, { agent: false }, (res) => {
      res.once('data', () => {
        res.pause();
        resolve(request);
      });
    });
    request.on('error', (err) => (request.destroyed ? undefined : reject(err)));
  });
}

async function measure(side: Side, dbPath: string, seconds: number): Promise<Run> {
  // Never cut during the run: what is measured is what a stalled reader costs while it lasts.
  const server = await startServer({ STATELOG_DB: dbPath, STATELOG_SYNC: 'normal', STATELOG_STALLED_READER_MS: '3600000' });
  let held: Database.Database | null = null;
  let reader: http.ClientRequest | null = null;
  try {
    if (side === 'held') {
      held = new Database(dbPath, { readonly: true });
      held.exec('BEGIN');
      held.prepare('SELECT head FROM meta').get();
    } else {
      reader = await stalledSnapshot(server.base);
    }
    const samples: number[] = [];
    let written = 0;
    const started = performance.now();
    let next = started;
    let nextSample = started;
    let i = 0;
    while (performance.now() - started < seconds * 1000) {
      const res = await fetch(`${server.base}/v1/keys/k-${i++ % 500}`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: VALUE });
      if (res.status !== 200) throw new Error(`PUT answered ${res.status}`);
      await res.arrayBuffer();
      written += VALUE.length;
      if (performance.now() >= nextSample) {
        samples.push(mb(walBytes(dbPath)));
        nextSample += 1000;
      }
      next += 1000 / PUTS_PER_SECOND;
      const wait = next - performance.now();
      if (wait > 0) await sleep(wait);
    }
    samples.push(mb(walBytes(dbPath)));
    return {
      side,
      seconds,
      writtenMb: mb(written),
      peakWalMb: Math.max(...samples),
      finalWalMb: samples[samples.length - 1]!,
      samplesMb: samples,
    };
  } finally {
    reader?.destroy();
    held?.exec('COMMIT');
    held?.close();
    await server.stop();
  }
}

export const walStalledReaderFigure: Figure = {
  name: 'wal-stalled-reader',
  title: 'SQLite WAL size while writers add ~2 MB/s and a snapshot reader stalls',
  async run(settings) {
    const seconds = Number(process.env.WAL_BENCH_SECONDS ?? (settings.smoke ? 3 : 90));
    const keys = Number(process.env.KEYS ?? (settings.smoke ? 2_000 : 20_000));
    const dir = mkdtempSync(join(tmpdir(), 'statelog-bench-'));
    try {
      const runs: Run[] = [];
      for (const side of ['spooled', 'held'] as const) {
        // A fresh file each side, so neither inherits the other's WAL.
        const dbPath = join(dir, `${side}.db`);
        seedLiveKeys(dbPath, { count: keys, value: (i) => JSON.stringify({ n: i, pad: 'x'.repeat(1000) }) });
        const run = await measure(side, dbPath, seconds);
        settings.log(`${side}: wrote ${run.writtenMb} MB in ${seconds} s; WAL peak ${run.peakWalMb} MB, at the end ${run.finalWalMb} MB`);
        runs.push(run);
      }
      const of = (side: Side) => runs.filter((run) => run.side === side);
      return {
        scale: `${keys} live keys of about 1 KB; ${PUTS_PER_SECOND} PUTs/s of 16 KiB values for ${seconds} s; one run a side`,
        settings: { keys, seconds, putsPerSecond: PUTS_PER_SECOND },
        metrics: [
          { label: 'WAL peak, stalled snapshot reader (spooled)', unit: 'MB', values: of('spooled').map((r) => r.peakWalMb), target: { op: '<=', value: 128 } },
          { label: 'WAL peak, read transaction held (a snapshot served from its transaction)', unit: 'MB', values: of('held').map((r) => r.peakWalMb) },
          { label: 'written', unit: 'MB', values: of('spooled').map((r) => r.writtenMb) },
        ],
        details: { runs },
      };
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
};
