// The fan-out figure (npm run bench:fanout, and part of npm run bench): 100 SSE
// subscribers on a real server process while a writer commits 2,000 records/s (batches
// of 10 every 5 ms); reports the delivery latency from commit (the record's ts, stamped
// by the server as it commits) to receipt by each subscriber, p50/p99/max, for several
// rounds (a fresh server each). The first second of writes warms the fresh server up
// (its JIT, its new files); their delays are reported apart. Subscribers live in
// SUBSCRIBER_PROCS child processes so that parsing does not delay receipt. Target:
// p99 <= 10 ms. Each round also measures,
// alternating with statelog, a bare relay that stores nothing
// (bench/reads/fanout-bare-server.ts): the floor of this machine under the same writer and
// subscribers.
// Options (environment): SUBSCRIBERS, RATE, SECONDS, WARMUP_SECONDS, SUBSCRIBER_PROCS, STATELOG_SYNC.
import { fork, type ChildProcess } from 'node:child_process';
import http from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { alternate, ratios, type Figure } from '../shared/figure.js';
import { histogramPercentile } from '../shared/lib.js';
import { startServer, type ServerProcess } from '../shared/server-process.js';

const RATE = Number(process.env.RATE ?? 2000);
const PROCS = Number(process.env.SUBSCRIBER_PROCS ?? 4);
const SYNC = process.env.STATELOG_SYNC ?? 'full';
const BATCH = 10;
const TICK_MS = (1000 * BATCH) / RATE;

interface Scale {
  subscribers: number;
  /** Seconds of writing a round. */
  seconds: number;
  /** Seconds of writing before them, on the fresh server, whose records are counted apart. */
  warmupSeconds: number;
}

interface Subscriber {
  child: ChildProcess;
  next<T>(type: string): Promise<T>;
  /** Sends a message and resolves with the answer of the same type. */
  ask<T>(message: { type: string; [field: string]: unknown }): Promise<T>;
}

export function startSubscribers(base: string, count: number): Subscriber {
  // Plain JavaScript, without tsx's loader: see bench/reads/fanout-subscriber.mjs.
  const child = fork(fileURLToPath(new URL('./fanout-subscriber.mjs', import.meta.url)), [base, String(count)], { execArgv: [] });
  const next = <T>(type: string) =>
    new Promise<T>((resolve) => {
      const listen = (message: { type: string }): void => {
        if (message.type !== type) return;
        child.off('message', listen);
        resolve(message as T);
      };
      child.on('message', listen);
    });
  return {
    child,
    next,
    ask<T>(message: { type: string }) {
      const answer = next<T>(message.type);
      child.send(message);
      return answer;
    },
  };
}

/** The subscribers' histograms of one kind, added bucket by bucket. */
export function added(histograms: number[][]): number[] {
  return histograms[0]!.map((_, i) => histograms.reduce((sum, h) => sum + h[i]!, 0));
}

/**
 * node:http with keep-alive: fetch() costs several times more CPU a request, which this
 * machine's two cores would take from the server and the subscribers.
 */
function post(agent: http.Agent, base: string, body: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const request = http.request(`${base}/v1/records`, { method: 'POST', agent, headers: { 'content-type': 'application/json' } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      res.on('end', () => (res.statusCode === 200 ? resolve((JSON.parse(text) as { offset: number }).offset) : reject(new Error(`write answered ${res.statusCode}: ${text}`))));
    });
    request.on('error', reject);
    request.end(body);
  });
}

/** Commits RATE records/s for `seconds`; returns the head and the rate achieved. */
async function write(base: string, seconds: number): Promise<{ head: number; records: number; seconds: number }> {
  const agent = new http.Agent({ keepAlive: true });
  const started = performance.now();
  const ticks = Math.round((seconds * 1000) / TICK_MS);
  const pending = new Set<Promise<void>>();
  let head = 0;
  let records = 0;
  for (let tick = 0; tick < ticks; tick++) {
    // Paced against the start time, so that a late tick does not shift the rest.
    const due = started + tick * TICK_MS;
    const wait = due - performance.now();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    const body = JSON.stringify({
      records: Array.from({ length: BATCH }, (_, i) => ({ key: `k${(tick * BATCH + i) % 10_000}`, value: { tick, i } })),
    });
    const request = post(agent, base, body)
      .then((offset) => {
        head = Math.max(head, offset);
        records += BATCH;
      })
      .finally(() => pending.delete(request));
    pending.add(request);
  }
  await Promise.all(pending);
  agent.destroy();
  return { head, records, seconds: (performance.now() - started) / 1000 };
}

const percentileOf = (histogram: number[], p: number): number => histogramPercentile(histogram, p, 0.1);

async function run(server: ServerProcess, scale: Scale) {
  const perProc = Math.ceil(scale.subscribers / PROCS);
  const subscribers = Array.from({ length: PROCS }, (_, i) =>
    startSubscribers(server.base, Math.min(perProc, scale.subscribers - i * perProc)),
  );
  await Promise.all(subscribers.map((s) => s.next('ready')));
  // The warm-up's records are told apart by offset; the subscribers acknowledge the
  // warm-up's head before any record after it is written.
  const warm = await write(server.base, scale.warmupSeconds);
  await Promise.all(subscribers.map((s) => s.ask({ type: 'warmed-up', head: warm.head })));
  const serverCpu = server.cpuSeconds();
  const writerCpu = process.cpuUsage();
  const written = await write(server.base, scale.seconds);

  // Every subscriber must receive every record.
  const deadline = Date.now() + 30_000;
  for (;;) {
    const progress = await Promise.all(subscribers.map((s) => s.ask<{ lowest: number }>({ type: 'progress' })));
    if (progress.every((p) => p.lowest >= written.head)) break;
    if (Date.now() > deadline) throw new Error(`subscribers stuck at ${JSON.stringify(progress)}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  type Report = { histogram: number[]; warmup: number[]; received: number; chunks: number; cpuSeconds: number };
  const reports = await Promise.all(subscribers.map((s) => s.ask<Report>({ type: 'report' })));
  const serverCpuSeconds = server.cpuSeconds() - serverCpu;
  const writer = process.cpuUsage(writerCpu);
  const histogram = added(reports.map((r) => r.histogram));
  const warmup = added(reports.map((r) => r.warmup));
  const received = reports.reduce((sum, r) => sum + r.received, 0);
  const expected = (warm.records + written.records) * scale.subscribers;
  if (received !== expected) throw new Error(`received ${received} records, expected ${expected}`);
  return {
    records: written.records,
    writeRate: Math.round(written.records / written.seconds),
    deliveries: received - warm.records * scale.subscribers,
    /** Socket reads that carried them, over all subscribers. */
    chunks: reports.reduce((sum, r) => sum + r.chunks, 0),
    p50Ms: percentileOf(histogram, 50),
    p90Ms: percentileOf(histogram, 90),
    p99Ms: percentileOf(histogram, 99),
    maxMs: percentileOf(histogram, 100),
    /** The same for the warm-up's records: the fresh server's first second. */
    warmup: { records: warm.records, p50Ms: percentileOf(warmup, 50), p99Ms: percentileOf(warmup, 99), maxMs: percentileOf(warmup, 100) },
    // Where the machine's CPU went while writing (the subscribers' share counts from their 'ready').
    cpuSeconds: {
      server: Math.round(serverCpuSeconds * 100) / 100,
      subscribers: Math.round(reports.reduce((sum, r) => sum + r.cpuSeconds, 0) * 100) / 100,
      writer: Math.round(((writer.user + writer.system) / 1e6) * 100) / 100,
    },
    /** The machine's 1-minute load average after the run (it has two cores). */
    loadAverage: loadavg()[0]!,
  };
}

/**
 * How long the server's group commits took to be durable in the run (its fresh
 * statelog_group_commit_duration_seconds histogram): the part of each record's latency
 * spent in the fsync before any subscriber may see it. Bucket bounds, so "at most".
 */
async function groupCommitLatency(base: string): Promise<{ groups: number; p50AtMostMs: number; p99AtMostMs: number }> {
  const text = await (await fetch(`${base}/metrics`)).text();
  const buckets = [...text.matchAll(/^statelog_group_commit_duration_seconds_bucket\{le="([^"]+)"\} (\d+)$/gm)].map(
    ([, le, count]) => ({ le: le === '+Inf' ? Infinity : Number(le) * 1000, count: Number(count) }),
  );
  const groups = buckets.at(-1)?.count ?? 0;
  const atMost = (p: number) => buckets.find((b) => b.count >= (p / 100) * groups)?.le ?? NaN;
  return { groups, p50AtMostMs: atMost(50), p99AtMostMs: atMost(99) };
}

type RunResult = Awaited<ReturnType<typeof run>> & { groupCommit?: Awaited<ReturnType<typeof groupCommitLatency>> };

const describe = (result: RunResult): string =>
  `${result.writeRate} records/s in ${result.chunks} chunks, latency p50 ${result.p50Ms} ms, p90 ${result.p90Ms} ms, p99 ${result.p99Ms} ms, max ${result.maxMs} ms ` +
  `(warm-up p99 ${result.warmup.p99Ms} ms, max ${result.warmup.maxMs} ms); ` +
  `CPU s server ${result.cpuSeconds.server}, subscribers ${result.cpuSeconds.subscribers}, ` +
  `writer ${result.cpuSeconds.writer}; load ${result.loadAverage.toFixed(1)}` +
  (result.groupCommit ? `; group commit to durable p50 <= ${result.groupCommit.p50AtMostMs} ms, p99 <= ${result.groupCommit.p99AtMostMs} ms` : '');

const SIDES = ['statelog', 'bare relay'] as const;

/** One round on a fresh server process: statelog, or the bare relay. */
async function measure(side: (typeof SIDES)[number], db: string, scale: Scale): Promise<RunResult> {
  const server = side === 'statelog' ? await startServer({ STATELOG_DB: db, STATELOG_SYNC: SYNC }) : await startServer({}, 'bench/reads/fanout-bare-server.ts');
  try {
    const result: RunResult = await run(server, scale);
    if (side === 'statelog') result.groupCommit = await groupCommitLatency(server.base);
    return result;
  } finally {
    await server.stop();
  }
}

export const fanoutFigure: Figure = {
  name: 'fanout',
  title: 'Change stream fan-out: SSE subscribers while writing 2,000 records/s, against a bare relay',
  async run(settings) {
    const scale: Scale = {
      subscribers: Number(process.env.SUBSCRIBERS ?? (settings.smoke ? 10 : 100)),
      seconds: Number(process.env.SECONDS ?? (settings.smoke ? 1 : 10)),
      warmupSeconds: Number(process.env.WARMUP_SECONDS ?? (settings.smoke ? 0.2 : 1)),
    };
    const dir = mkdtempSync(join(tmpdir(), 'statelog-bench-'));
    try {
      const rounds = await alternate(settings.rounds, SIDES, async (side, round) => {
        const result = await measure(side, join(dir, `round-${round}.db`), scale);
        settings.log(`round ${round + 1}, ${side}: ${describe(result)}`);
        return result;
      });
      const statelog = rounds['statelog'];
      const bare = rounds['bare relay'];
      return {
        scale:
          `${scale.subscribers} subscribers in ${PROCS} processes, ${RATE} records/s (batches of ${BATCH}) for ${scale.seconds} s a round ` +
          `after ${scale.warmupSeconds} s of warm-up on the fresh server (its records counted apart), ` +
          `STATELOG_SYNC=${SYNC}, LOG_LEVEL=info (200 access-log lines a second); latency from the commit's timestamp to receipt; ` +
          'the bare relay (bench/reads/fanout-bare-server.ts) stores and fsyncs nothing',
        settings: { subscribers: scale.subscribers, rate: RATE, batch: BATCH, seconds: scale.seconds, warmupSeconds: scale.warmupSeconds, subscriberProcesses: PROCS, sync: SYNC },
        metrics: [
          { label: 'statelog delivery p50', unit: 'ms', values: statelog.map((r) => r.p50Ms) },
          { label: 'statelog delivery p99', unit: 'ms', values: statelog.map((r) => r.p99Ms), target: { op: '<=', value: 10 } },
          { label: 'bare relay delivery p50', unit: 'ms', values: bare.map((r) => r.p50Ms) },
          { label: 'bare relay delivery p99', unit: 'ms', values: bare.map((r) => r.p99Ms) },
          { label: 'ratio statelog / bare relay (p99)', unit: '×', values: ratios(statelog.map((r) => r.p99Ms), bare.map((r) => r.p99Ms)) },
          { label: 'statelog delivery p99 in the warm-up', unit: 'ms', values: statelog.map((r) => r.warmup.p99Ms) },
          { label: 'bare relay delivery p99 in the warm-up', unit: 'ms', values: bare.map((r) => r.warmup.p99Ms) },
          { label: 'statelog group commit to durable, p99 at most', unit: 'ms', values: statelog.map((r) => r.groupCommit!.p99AtMostMs) },
          { label: 'statelog server CPU a round', unit: 's', values: statelog.map((r) => r.cpuSeconds.server) },
          { label: 'bare relay server CPU a round', unit: 's', values: bare.map((r) => r.cpuSeconds.server) },
        ],
        details: { statelog, bare },
      };
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
};
