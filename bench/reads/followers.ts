// Many followers, one origin (npm run bench -- --only followers): what a restart herd of
// snapshot readers, a thousand long-poll followers and a thousand SSE subscribers cost
// the server, with the code before shared snapshots and Link (BASE_COMMIT, built beside
// this checkout) side by side in one run, the long polls and streams also against bare
// relays (bench/reads/longpoll-bare-server.ts, bench/reads/fanout-bare-server.ts), and the same
// followers behind nginx with
// deploy/nginx/statelog.conf.template. Counts (reads of the store, requests reaching
// the server) do not depend on the machine's load; times and CPU do.
// Options (environment): WORKERS, KEYS, POLLERS, POLL_WRITES, STREAMS, STREAM_WRITES,
// NGINX_POLLERS, NGINX_WRITES, SECONDS, BASE_COMMIT.
import { fork, type ChildProcess } from 'node:child_process';
import http from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { SERVER_ENTRY } from '../../harness/build.js';
import { hasNginx, startNginx } from '../../harness/nginx.js';
import { buildCommit } from '../shared/base-build.js';
import { describeCpu, measureCpu, pidsNamed } from '../shared/cpu-share.js';
import { added, startSubscribers } from './fanout.js';
import type { Figure } from '../shared/figure.js';
import { filledTemplate, histogramPercentile, round, sleep, workingCopy } from '../shared/lib.js';
import { startServer, type ServerProcess } from '../shared/server-process.js';

const BASE_COMMIT = process.env.BASE_COMMIT ?? '947a51c';

interface Scale {
  workers: number;
  keys: number;
  pollers: number;
  pollWrites: number;
  streams: number;
  streamWrites: number;
  nginxPollers: number;
  nginxWrites: number;
  seconds: number;
}

/** A counter's value from the server's /metrics (0 when the server has no such counter). */
async function counter(base: string, name: string): Promise<number> {
  const text = await (await fetch(`${base}/metrics`)).text();
  return text
    .split('\n')
    .filter((line) => line.startsWith(`${name} `) || line.startsWith(`${name}{`))
    .reduce((sum, line) => sum + Number(line.split(' ').at(-1)), 0);
}

/** One snapshot read to its end, retried after a 429 or 503 as clients do; its key count. */
async function snapshotOnce(base: string, path: string, agent: http.Agent): Promise<{ keys: number; refused: number }> {
  let refused = 0;
  for (;;) {
    const answer = await new Promise<{ status: number; tail: string }>((resolve, reject) => {
      http
        .get(`${base}${path}`, { agent }, (res) => {
          // Bytes, not text: a thousand readers of a large state would decode gigabytes.
          let tail = Buffer.alloc(0);
          res.on('data', (chunk: Buffer) => (tail = Buffer.concat([tail, chunk]).subarray(-300)));
          res.on('end', () => resolve({ status: res.statusCode!, tail: tail.toString('utf8') }));
          res.on('error', reject);
        })
        .on('error', reject);
    });
    if (answer.status === 200) {
      const trailer = JSON.parse(answer.tail.trim().split('\n').at(-1)!) as { end?: true; count: number };
      if (!trailer.end) throw new Error('a snapshot ended without its trailer');
      return { keys: trailer.count, refused };
    }
    refused++;
    await sleep(1000);
  }
}

/** WORKERS snapshot readers at once against `base`; the server's cost of serving them. */
export async function herd(server: ServerProcess, base: string, path: string, workers: number) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity });
  const cpu = server.cpuSeconds();
  const reads = await counter(server.base, 'statelog_snapshot_reads_total');
  const started = performance.now();
  const results = await Promise.all(Array.from({ length: workers }, () => snapshotOnce(base, path, agent)));
  const seconds = (performance.now() - started) / 1000;
  agent.destroy();
  const cpuSeconds = server.cpuSeconds() - cpu;
  const keys = results.reduce((sum, r) => sum + r.keys, 0);
  const storeReads = (await counter(server.base, 'statelog_snapshot_reads_total')) - reads;
  return {
    allReadySeconds: round(seconds, 2),
    refused: results.reduce((sum, r) => sum + r.refused, 0),
    // The code before shared snapshots has no counter: each answer was a read of its own.
    storeReads: storeReads > 0 ? storeReads : workers,
    serverCpuSeconds: round(cpuSeconds, 2),
    cpuMicrosecondsPerKey: round((cpuSeconds * 1e6) / keys, 3),
  };
}

interface Pollers {
  children: ChildProcess[];
  ask<T>(type: string): Promise<T[]>;
}

function startPollers(base: string, count: number, after: number): Promise<Pollers> {
  // Two processes: parsing a thousand answers a write is more than one core's share.
  const sizes = count > 1 ? [Math.ceil(count / 2), Math.floor(count / 2)] : [count];
  const children = sizes.map((size) =>
    fork(fileURLToPath(new URL('./follower-poller.mjs', import.meta.url)), [base, String(size), String(after), '30'], { execArgv: [] }),
  );
  const next = <T>(child: ChildProcess, type: string) =>
    new Promise<T>((resolve) => {
      const listen = (message: { type: string }): void => {
        if (message.type !== type) return;
        child.off('message', listen);
        resolve(message as T);
      };
      child.on('message', listen);
    });
  const pollers: Pollers = {
    children,
    ask: <T>(type: string) =>
      Promise.all(
        children.map((child) => {
          const answer = next<T>(child, type);
          child.send({ type });
          return answer;
        }),
      ),
  };
  return Promise.all(children.map((child) => next(child, 'ready'))).then(() => pollers);
}

/** PUTs of small values, `rate` a second for `seconds`; the head after the last. */
async function paced(base: string, rate: number, seconds: number): Promise<number> {
  const agent = new http.Agent({ keepAlive: true });
  const started = performance.now();
  let head = 0;
  const pending: Promise<void>[] = [];
  for (let i = 0; i < rate * seconds; i++) {
    const wait = started + (i * 1000) / rate - performance.now();
    if (wait > 0) await sleep(wait);
    pending.push(
      new Promise((resolve, reject) => {
        const request = http.request(`${base}/v1/keys/k${i % 100}`, { method: 'PUT', agent, headers: { 'content-type': 'application/json' } }, (res) => {
          let text = '';
          res.on('data', (chunk: Buffer) => (text += chunk.toString()));
          res.on('end', () => {
            head = Math.max(head, (JSON.parse(text) as { offset: number }).offset);
            resolve();
          });
        });
        request.on('error', reject);
        request.end(JSON.stringify({ value: { i } }));
      }),
    );
  }
  await Promise.all(pending);
  agent.destroy();
  return head;
}


/**
 * `count` long-poll followers at the head of `base` while `rate` writes a second commit;
 * `upstream` counts the requests that reached the server (without it, the followers' own).
 */
export async function polls(server: ServerProcess, base: string, count: number, rate: number, seconds: number, upstream?: () => number) {
  const pollers = await startPollers(base, count, 0);
  await sleep(1500);
  const cpu = server.cpuSeconds();
  const before = upstream?.() ?? 0;
  // Where the two cores went: what bounds the delay when the host, not the server, is full.
  const { cpu: share } = await measureCpu(
    { server: () => [server.child.pid!], nginx: () => pidsNamed('nginx'), followers: () => pollers.children.map((child) => child.pid!) },
    async () => {
      const head = await paced(server.base, rate, seconds);
      const deadline = Date.now() + 60_000;
      while ((await pollers.ask<{ lowest: number }>('progress')).some((p) => p.lowest < head)) {
        if (Date.now() > deadline) throw new Error('followers did not reach the head');
        await sleep(100);
      }
    },
  );
  const cpuSeconds = server.cpuSeconds() - cpu;
  const passed = upstream ? upstream() - before : null;
  type Report = { histogram: number[]; requests: number; received: number; failures: number };
  const reports = await pollers.ask<Report>('report');
  const histogram = reports[0]!.histogram.map((_, i) => reports.reduce((sum, r) => sum + r.histogram[i]!, 0));
  const received = reports.reduce((sum, r) => sum + r.received, 0);
  const writes = rate * seconds;
  return {
    writes,
    delivered: received === writes * count,
    serverRequestsPerWrite: round((passed ?? reports.reduce((sum, r) => sum + r.requests, 0)) / writes, 2),
    serverCpuMsPerWrite: round((cpuSeconds * 1000) / writes, 2),
    delayP50Ms: histogramPercentile(histogram, 50, 1),
    delayP99Ms: histogramPercentile(histogram, 99, 1),
    failures: reports.reduce((sum, r) => sum + r.failures, 0),
    cpu: describeCpu(share),
  };
}

/** `count` SSE subscribers (`/v1/changes/stream`) while `rate` single writes a second commit. */
export async function streams(server: ServerProcess, count: number, rate: number, seconds: number) {
  // Four processes: each scans its streams' bytes, a thousand streams a write.
  const sizes = Array.from({ length: 4 }, (_, i) => Math.floor(count / 4) + (i < count % 4 ? 1 : 0)).filter((n) => n > 0);
  const subscribers = sizes.map((size) => startSubscribers(server.base, size));
  await Promise.all(subscribers.map((s) => s.next('ready')));
  // No warm-up: every record counts (the subscriber keeps records up to `head` apart).
  await Promise.all(subscribers.map((s) => s.ask({ type: 'warmed-up', head: 0 })));
  await sleep(1000);
  const cpu = server.cpuSeconds();
  const head = await paced(server.base, rate, seconds);
  const deadline = Date.now() + 60_000;
  while ((await Promise.all(subscribers.map((s) => s.ask<{ lowest: number }>({ type: 'progress' })))).some((p) => p.lowest < head)) {
    if (Date.now() > deadline) throw new Error('subscribers did not reach the head');
    await sleep(100);
  }
  const cpuSeconds = server.cpuSeconds() - cpu;
  type Report = { histogram: number[]; received: number };
  const reports = await Promise.all(subscribers.map((s) => s.ask<Report>({ type: 'report' })));
  const histogram = added(reports.map((r) => r.histogram));
  const writes = rate * seconds;
  return {
    writes,
    delivered: reports.reduce((sum, r) => sum + r.received, 0) === writes * count,
    serverCpuMsPerWrite: round((cpuSeconds * 1000) / writes, 2),
    delayP50Ms: histogramPercentile(histogram, 50, 0.1),
    delayP99Ms: histogramPercentile(histogram, 99, 0.1),
  };
}

export async function withServer<T>(entry: string, db: string, use: (server: ServerProcess) => Promise<T>, env: Record<string, string> = {}): Promise<T> {
  const server = await startServer({ STATELOG_DB: db, STATELOG_SYNC: 'normal', STATELOG_MAX_EVENT_LOOP_DELAY_MS: '0', ...env }, entry);
  try {
    return await use(server);
  } finally {
    await server.stop();
  }
}

export const followersFigure: Figure = {
  name: 'followers',
  title: 'Many followers, one origin: a restart herd of snapshots and long-poll followers, direct and behind nginx',
  async run(settings) {
    const scale: Scale = {
      workers: Number(process.env.WORKERS ?? (settings.smoke ? 5 : 150)),
      keys: Number(process.env.KEYS ?? (settings.smoke ? 1000 : 200_000)),
      pollers: Number(process.env.POLLERS ?? (settings.smoke ? 10 : 1000)),
      pollWrites: Number(process.env.POLL_WRITES ?? 20),
      streams: Number(process.env.STREAMS ?? (settings.smoke ? 10 : 1000)),
      streamWrites: Number(process.env.STREAM_WRITES ?? 50),
      nginxPollers: Number(process.env.NGINX_POLLERS ?? (settings.smoke ? 10 : 2000)),
      nginxWrites: Number(process.env.NGINX_WRITES ?? 10),
      seconds: Number(process.env.SECONDS ?? (settings.smoke ? 1 : 10)),
    };
    const base = join(buildCommit(BASE_COMMIT), 'server.js');
    const template = filledTemplate(scale.keys, scale.keys, settings.log);
    const dir = mkdtempSync(join(tmpdir(), 'statelog-followers-'));
    const sides = { before: base, now: SERVER_ENTRY } as const;
    const herds: Record<string, Awaited<ReturnType<typeof herd>>> = {};
    const pollsDirect: Record<string, Awaited<ReturnType<typeof polls>>> = {};
    const streamsDirect: Record<string, Awaited<ReturnType<typeof streams>>> = {};
    let herdNginx: (Awaited<ReturnType<typeof herd>> & { serverAnswers: number }) | null = null;
    let pollsNginx: Awaited<ReturnType<typeof polls>> | null = null;
    try {
      for (const [side, entry] of Object.entries(sides)) {
        const copy = workingCopy(template, `followers-${side}`);
        try {
          herds[side] = await withServer(entry, copy.path, (server) => herd(server, server.base, '/v1/snapshot', scale.workers));
        } finally {
          copy.dispose();
        }
        settings.log(`restart herd, ${side}: ${JSON.stringify(herds[side])}`);
        pollsDirect[side] = await withServer(entry, join(dir, `polls-${side}.db`), (server) => polls(server, server.base, scale.pollers, scale.pollWrites, scale.seconds));
        settings.log(`${scale.pollers} long polls at ${scale.pollWrites} writes/s, ${side}: ${JSON.stringify(pollsDirect[side])}`);
        streamsDirect[side] = await withServer(entry, join(dir, `streams-${side}.db`), (server) => streams(server, scale.streams, scale.streamWrites, scale.seconds));
        settings.log(`${scale.streams} SSE subscribers at ${scale.streamWrites} writes/s, ${side}: ${JSON.stringify(streamsDirect[side])}`);
      }
      streamsDirect['bare relay'] = await withServer('bench/reads/fanout-bare-server.ts', join(dir, 'streams-bare.db'), (server) => streams(server, scale.streams, scale.streamWrites, scale.seconds));
      settings.log(`${scale.streams} SSE subscribers at ${scale.streamWrites} writes/s, bare relay: ${JSON.stringify(streamsDirect['bare relay'])}`);
      // The floor: the same followers against a relay that keeps records in memory and uses no framework.
      pollsDirect['bare relay'] = await withServer('bench/reads/longpoll-bare-server.ts', join(dir, 'polls-bare.db'), (server) => polls(server, server.base, scale.pollers, scale.pollWrites, scale.seconds));
      settings.log(`${scale.pollers} long polls at ${scale.pollWrites} writes/s, bare relay: ${JSON.stringify(pollsDirect['bare relay'])}`);
      if (hasNginx) {
        const copy = workingCopy(template, 'followers-nginx');
        try {
          herdNginx = await withServer(SERVER_ENTRY, copy.path, async (server) => {
            const nginx = await startNginx(join(dir, 'nginx-herd'), server.base.replace(/^http:\/\//, ''));
            try {
              return { ...(await herd(server, nginx.url, '/v1/snapshot?minOffset=0', scale.workers)), serverAnswers: nginx.upstreamRequests('/v1/snapshot') };
            } finally {
              await nginx.stop();
            }
          });
        } finally {
          copy.dispose();
        }
        settings.log(`restart herd through nginx (minOffset=0): ${JSON.stringify(herdNginx)}`);
        pollsNginx = await withServer(SERVER_ENTRY, join(dir, 'polls-nginx.db'), async (server) => {
          const nginx = await startNginx(join(dir, 'nginx-polls'), server.base.replace(/^http:\/\//, ''));
          try {
            return await polls(server, nginx.url, scale.nginxPollers, scale.nginxWrites, scale.seconds, () => nginx.upstreamRequests('/v1/changes'));
          } finally {
            await nginx.stop();
          }
        });
        settings.log(`${scale.nginxPollers} long polls through nginx at ${scale.nginxWrites} writes/s: ${JSON.stringify(pollsNginx)}`);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
      rmSync(join(base, '..'), { recursive: true, force: true });
    }
    const both = (label: string, unit: string, pick: (side: string) => number, target?: { op: '<=' | '>='; value: number }) => [
      { label: `${label}, before`, unit, values: [pick('before')] },
      { label: `${label}, now`, unit, values: [pick('now')], ...(target ? { target } : {}) },
    ];
    return {
      scale:
        `${scale.workers} workers × ${scale.keys.toLocaleString()} keys at once; ${scale.pollers} long polls (wait=30) at ${scale.pollWrites} writes/s; ` +
        `${scale.streams} SSE subscribers at ${scale.streamWrites} writes/s; ` +
        `${scale.nginxPollers} through nginx at ${scale.nginxWrites} writes/s, ${scale.seconds} s; "before" is commit ${BASE_COMMIT}, built beside this one; STATELOG_SYNC=normal`,
      settings: { ...scale, baseCommit: BASE_COMMIT },
      metrics: [
        ...both('restart herd: all ready', 's', (side) => herds[side]!.allReadySeconds, { op: '<=', value: 8 }),
        ...both('restart herd: reads of the state from the store', '', (side) => herds[side]!.storeReads, { op: '<=', value: 3 }),
        ...both('restart herd: server CPU a key delivered', 'µs', (side) => herds[side]!.cpuMicrosecondsPerKey, { op: '<=', value: 0.25 }),
        ...both('restart herd: answers 429', '', (side) => herds[side]!.refused),
        ...both('long polls: server CPU a write', 'ms', (side) => pollsDirect[side]!.serverCpuMsPerWrite, { op: '<=', value: 15 }),
        ...both('long polls: requests to the server a write', '', (side) => pollsDirect[side]!.serverRequestsPerWrite),
        ...both('long polls: delay p99', 'ms', (side) => pollsDirect[side]!.delayP99Ms),
        { label: 'long polls: server CPU a write, bare relay', unit: 'ms', values: [pollsDirect['bare relay']!.serverCpuMsPerWrite] },
        { label: 'long polls: requests to the server a write, bare relay', unit: '', values: [pollsDirect['bare relay']!.serverRequestsPerWrite] },
        ...both('SSE subscribers: server CPU a write', 'ms', (side) => streamsDirect[side]!.serverCpuMsPerWrite, { op: '<=', value: 8 }),
        ...both('SSE subscribers: delay p99', 'ms', (side) => streamsDirect[side]!.delayP99Ms, { op: '<=', value: 50 }),
        { label: 'SSE subscribers: server CPU a write, bare relay', unit: 'ms', values: [streamsDirect['bare relay']!.serverCpuMsPerWrite] },
        ...(herdNginx
          ? [
              { label: 'restart herd through nginx: snapshots the server answered', unit: '', values: [herdNginx.serverAnswers], target: { op: '<=' as const, value: 3 } },
              { label: 'restart herd through nginx: all ready', unit: 's', values: [herdNginx.allReadySeconds], target: { op: '<=' as const, value: 8 } },
            ]
          : []),
        ...(pollsNginx
          ? [
              { label: 'long polls through nginx: requests to the server a write', unit: '', values: [pollsNginx.serverRequestsPerWrite], target: { op: '<=' as const, value: 3 } },
              { label: 'long polls through nginx: delay p99', unit: 'ms', values: [pollsNginx.delayP99Ms], target: { op: '<=' as const, value: 1000 } },
            ]
          : []),
      ],
      details: { herds, pollsDirect, streamsDirect, herdNginx, pollsNginx },
      notes: [
        'Reads of the store and requests reaching the server are counts: they do not depend on the machine. Times and CPU do: the followers, nginx and the server share two cores.',
      ],
    };
  },
};
