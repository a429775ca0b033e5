// Where a durable PUT's time goes, on the compiled server (npm run build first; the npm
// script does it) under the suite's c = 50 PUT load (bench/shared/load.ts):
//   1. a V8 CPU profile (node --cpu-prof) at LOG_LEVEL=info (--log-level), summarised by
//      stage of a request and by function, with the process's CPU time a request;
//   2. fsync calls counted and timed with strace (when installed): how long the event
//      loop sits in fdatasync, and how many PUTs one fsync serves;
//   3. the same load on variants of the server, alternating with the default in each
//      round, each changed by the environment only: STATELOG_SYNC=normal (no fsync),
//      LOG_LEVEL=info (an access-log line a request, the production default),
//      STATELOG_MAX_EVENT_LOOP_DELAY_MS=0 (no overload sampling), and through tsx.
//   npm run bench:profile [-- --seconds 10 --rounds 3 --profile-only]
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { Command } from 'commander';
import type { LoopResult } from '../shared/closed-loop.js';
import { loadAverage } from '../shared/facts.js';
import { alternate, ratios } from '../shared/figure.js';
import { ROOT, startStatelog, summary, type Server } from '../shared/lib.js';
import { processSeconds } from '../shared/cpu-share.js';
import { loadOf } from '../shared/load.js';
import { putRequest } from '../writes/write.js';

const options = new Command('bench:profile')
  .option('--seconds <n>', 'seconds of load for the profile and for each variant a round', Number, 10)
  .option('--rounds <n>', 'rounds of the variants', Number, 3)
  .option('--connections <n>', 'concurrent PUTs', Number, 50)
  .option('--analyse <file>', 'only summarise a .cpuprofile written earlier')
  .option('--log-level <level>', 'LOG_LEVEL of the profiled server (info: the production default, an access-log line a request)', 'info')
  .option('--profile-only', 'only the CPU profile (no strace, no variants)', false)
  .option('--entry <file>', 'the compiled server: dist/server.js, or a build of a variant (.variant-x/server.js)', 'dist/server.js')
  .parse()
  .opts<{ seconds: number; rounds: number; connections: number; analyse?: string; logLevel: string; profileOnly: boolean; entry: string }>();

const COMPILED = options.entry;
if (!options.analyse && !existsSync(join(ROOT, COMPILED))) throw new Error(`${COMPILED} is missing: npm run build first`);

// ---------------------------------------------------------------- 1. the CPU profile

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
  startTime: number;
  endTime: number;
}

type Frame = ProfileNode['callFrame'];

// A compiled statelog file: in dist/ or a variant's build (.variant-x/, .base-x/).
const BUILD = /\/(dist|\.variant-[^/]+|\.base-[^/]+)\//;
const ownCode = (url: string) => BUILD.test(url) && !url.includes('/node_modules/');
// By file name within the build, wherever in it the file sits.
const own = (frame: Frame, file: string) => ownCode(frame.url) && frame.url.endsWith(`/${file}`);
const inPackage = (frame: Frame, name: string) => frame.url.includes(`/node_modules/${name}/`);

/**
 * The stage of a PUT a frame belongs to, or null for frames that say nothing (timers,
 * promise plumbing, node:fs). A sample is charged to the innermost frame of its stack
 * that has a stage. Native calls (SQLite statements, fdatasync, write(2)) have at most a
 * frame without a file: their time goes to that frame or to the JS function that made them.
 */
export function areaOf(frame: Frame): string | null {
  const { functionName: name, url } = frame;
  if (name === '(idle)') return IDLE;
  if (name === '(garbage collector)') return 'garbage collection';
  if (name === '(program)') return 'V8 and native code outside JS frames';
  if ((name === 'fdatasync' || name === 'fsync') && url === '') return 'fsync: fdatasync of the WAL, when on the event loop';
  if (own(frame, 'wal-syncer.js')) return 'fsync: fdatasync of the WAL, when on the event loop';
  if ((ownCode(url) && url.includes('/store/')) || inPackage(frame, 'better-sqlite3')) return "SQLite: the group's transaction and statements (WAL write included)";
  if (own(frame, 'write-batcher.js') || (own(frame, 'write-request.js') && name === 'submitWrite')) return 'group commit: queueing, the group, resolving each request';
  if (inPackage(frame, 'secure-json-parse') || (own(frame, 'parsing.js') && name === 'parseJsonBody')) return 'parse and validate: JSON body';
  if (url.includes('fastify/lib/validation.js') || inPackage(frame, 'ajv') || (/^validate\d*$/.test(name) && url === '')) return 'parse and validate: schema (ajv)';
  if (own(frame, 'key-rules.js') || own(frame, 'preconditions.js') || (own(frame, 'write-request.js') && name === 'valueText')) return 'parse and validate: key, value, preconditions';
  if (inPackage(frame, 'pino') || inPackage(frame, 'sonic-boom') || inPackage(frame, 'fast-redact') || (own(frame, 'request-pipeline.js') && name === 'requestCompleted')) return 'access log: pino line and its write(2)';
  if (inPackage(frame, 'prom-client') || own(frame, 'metrics.js')) return 'metrics (prom-client)';
  if (own(frame, 'overload.js')) return 'overload check';
  if (inPackage(frame, 'find-my-way')) return 'routing (find-my-way)';
  if (inPackage(frame, 'fast-json-stringify') || url.includes('fastify/lib/reply.js') || own(frame, 'render.js') || own(frame, 'reply.js')) return 'reply: status, headers, body';
  if (/^node:(_http_outgoing|internal\/stream_base_commons|internal\/streams\/writable)/.test(url) || name === 'writev' || name === 'writeBuffer' || name === 'writeUtf8String' || name === 'writeLatin1String') return 'reply: node HTTP response and socket write';
  if (/^node:(_http_server|_http_common|_http_incoming|net|internal\/streams\/readable|stream)/.test(url)) return 'HTTP: node request parsing and socket reads';
  if (/\/node_modules\/(fastify|avvio|light-my-request|@fastify\/[^/]+)\//.test(url)) return 'routing: fastify request lifecycle and hooks';
  if (ownCode(url)) return 'statelog route handlers and hooks';
  return null;
}

const IDLE = 'idle: the event loop waiting for sockets';

const frameLabel = (frame: Frame) =>
  `${frame.functionName || '(anonymous)'} ${frame.url.replace(/^.*\/(node_modules|dist|\.variant-[^/]+|\.base-[^/]+)\//, '$1/').replace(/^file:\/\//, '')}:${frame.lineNumber + 1}`;

function summarise(profile: CpuProfile) {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const stackOf = (id: number) => {
    const frames: Frame[] = [];
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) frames.push(byId.get(at)!.callFrame);
    return frames;
  };
  // Only the load: from the first group commit to the last (start-up and shutdown left out).
  const committing = profile.samples.map((id) => stackOf(id).some((f) => own(f, 'write-batcher.js') && f.functionName === 'flush'));
  // A read-only load commits nothing: then the whole profile is the window.
  const [first, last] = committing.includes(true) ? [committing.indexOf(true), committing.lastIndexOf(true)] : [0, committing.length - 1];
  const self = new Map<string, number>();
  const areas = new Map<string, number>();
  const add = (map: Map<string, number>, label: string, ms: number) => map.set(label, (map.get(label) ?? 0) + ms);
  let total = 0;
  for (let i = first; i <= last; i++) {
    // timeDeltas[i] is the time since the previous sample. A sample cannot be taken while
    // the thread sits in a system call such as fdatasync: the one taken right after it
    // sees the caller's stack, and the gap before it is that call's time.
    const ms = profile.timeDeltas[i]! / 1000;
    total += ms;
    const stack = stackOf(profile.samples[i]!);
    add(self, frameLabel(stack[0]!), ms);
    let area = 'other';
    for (let f = 0; f < stack.length; f++) {
      const found = areaOf(stack[f]!);
      if (found) {
        area = found;
        break;
      }
    }
    add(areas, area, ms);
  }
  const share = (entries: Map<string, number>, count: number) =>
    [...entries]
      .sort((a, b) => b[1] - a[1])
      .slice(0, count)
      .map(([label, ms]) => ({ label, ms: Math.round(ms), percent: Number(((100 * ms) / total).toFixed(1)) }));
  const busyMs = total - (areas.get(IDLE) ?? 0);
  return { windowMs: Math.round(total), busyMs: Math.round(busyMs), areas: share(areas, 30), topSelf: share(self, 30), areaMs: Object.fromEntries(areas) };
}

async function putLoad(server: Server, seconds: number): Promise<LoopResult> {
  return loadOf(server.url, options.connections, seconds, putRequest);
}

async function cpuProfile() {
  const dir = mkdtempSync(join(tmpdir(), 'statelog-prof-'));
  // The access log is written into a pipe that is read and dropped, as a log shipper would take it.
  const server = await startStatelog(
    { LOG_LEVEL: options.logLevel },
    { entry: COMPILED, output: 'discard', nodeArgs: ['--cpu-prof', `--cpu-prof-dir=${dir}`] },
  );
  let load: LoopResult;
  let warmup: LoopResult;
  let cpuSeconds: number;
  try {
    const before = processSeconds(server.proc.pid!);
    warmup = await putLoad(server, 2);
    load = await putLoad(server, options.seconds);
    cpuSeconds = processSeconds(server.proc.pid!) - before;
  } finally {
    await server.stop();
  }
  const file = readdirSync(dir).find((name) => name.endsWith('.cpuprofile'));
  if (!file) throw new Error('the server wrote no CPU profile');
  const profile = JSON.parse(readFileSync(join(dir, file), 'utf8')) as CpuProfile;
  const kept = join(tmpdir(), `statelog-put-c${options.connections}.cpuprofile`);
  writeFileSync(kept, JSON.stringify(profile));
  rmSync(dir, { recursive: true, force: true });
  // The profile's window runs from the first group commit (in the warm-up) to the last.
  const requests = warmup.requests + load.requests;
  const summary = summarise(profile);
  const perRequest = (ms: number) => Number(((ms * 1000) / requests).toFixed(1));
  return {
    load,
    logLevel: options.logLevel,
    requests,
    // All the server's threads (the thread pool's fsyncs, GC and compiler helpers too), from /proc.
    processCpuUsPerRequest: Number(((cpuSeconds * 1e6) / requests).toFixed(1)),
    mainThreadBusyUsPerRequest: perRequest(summary.busyMs),
    stagesUsPerRequest: Object.fromEntries(Object.entries(summary.areaMs).filter(([label]) => label !== IDLE).map(([label, ms]) => [label, perRequest(ms)])),
    profileFile: kept,
    ...summary,
  };
}

// ---------------------------------------------------------------- 2. fsync, counted by strace

async function fsyncCount() {
  if (spawnSync('sh', ['-c', 'command -v strace']).status !== 0) return null;
  const out = join(tmpdir(), `statelog-strace-${process.pid}.txt`);
  // -w: time in the call (wall clock); --seccomp-bpf: only these calls stop the process.
  const server = await startStatelog({}, { entry: COMPILED, wrapper: ['strace', '-f', '--seccomp-bpf', '-c', '-w', '-e', 'trace=fsync,fdatasync', '-o', out] });
  let load: LoopResult;
  try {
    await putLoad(server, 2);
    load = await putLoad(server, options.seconds);
  } finally {
    await server.stop();
  }
  const text = readFileSync(out, 'utf8');
  rmSync(out, { force: true });
  // "% time  seconds  usecs/call  calls  errors syscall"
  const calls = [...text.matchAll(/^\s*[\d.]+\s+([\d.]+)\s+(\d+)\s+(\d+)\s+(?:\d+\s+)?(fsync|fdatasync)$/gm)].map((m) => ({
    syscall: m[4]!,
    seconds: Number(m[1]),
    usecsPerCall: Number(m[2]),
    calls: Number(m[3]),
  }));
  const fsyncs = calls.reduce((n, c) => n + c.calls, 0);
  const fsyncSeconds = calls.reduce((n, c) => n + c.seconds, 0);
  // The counts cover warm-up, load and shutdown; the load is most of it.
  const requests = load.requests;
  return {
    load,
    calls,
    note: 'counts cover the 2 s warm-up, the load and shutdown; per-second figures divide by warm-up + load seconds',
    fsyncsPerSecond: Math.round(fsyncs / (options.seconds + 2)),
    putsPerFsync: Number((requests / (fsyncs * (options.seconds / (options.seconds + 2)))).toFixed(1)),
    shareOfWallTimeInFsync: Number((fsyncSeconds / (options.seconds + 2)).toFixed(3)),
    raw: text,
  };
}

// ---------------------------------------------------------------- 3. variants

const VARIANTS: Record<string, { env: Record<string, string>; entry?: string }> = {
  default: { env: {} },
  'STATELOG_SYNC=normal': { env: { STATELOG_SYNC: 'normal' } },
  'LOG_LEVEL=info': { env: { LOG_LEVEL: 'info' } },
  'STATELOG_MAX_EVENT_LOOP_DELAY_MS=0': { env: { STATELOG_MAX_EVENT_LOOP_DELAY_MS: '0' } },
  'through tsx (src/server.ts)': { env: {}, entry: 'src/server.ts' },
};

async function variants() {
  const names = Object.keys(VARIANTS);
  const servers = new Map<string, Server>();
  try {
    for (const name of names) {
      const v = VARIANTS[name]!;
      // LOG_LEVEL=info writes a line a request: into a pipe that is read and dropped, as a log shipper would take it.
      servers.set(name, await startStatelog(v.env, { entry: v.entry ?? COMPILED, ...(v.env.LOG_LEVEL ? { output: 'discard' as const } : {}) }));
    }
    for (const name of names) await putLoad(servers.get(name)!, 1);
    const seconds = Math.max(2, Math.round(options.seconds / 3));
    const runs = await alternate(options.rounds, names, async (name, round) => {
      const result = await putLoad(servers.get(name)!, seconds);
      console.log(`  variants round ${round + 1}: ${name} ${result.rps.toFixed(0)} req/s, p99 ${result.p99.toFixed(1)} ms`);
      return result;
    });
    const rps = (name: string) => runs[name]!.map((r) => r.rps);
    return Object.fromEntries(
      names.map((name) => [name, { rps: summary(rps(name)), p99: summary(runs[name]!.map((r) => r.p99)), ratioToDefault: summary(ratios(rps(name), rps('default'))) }]),
    );
  } finally {
    for (const server of servers.values()) await server.stop();
  }
}

function printProfile(summary: ReturnType<typeof summarise>): void {
  console.log(`  by area (${summary.windowMs} ms from the first group commit to the last):`);
  for (const a of summary.areas) console.log(`  ${a.percent.toFixed(1).padStart(5)} %  ${a.label}`);
  console.log('  top functions (self time):');
  for (const f of summary.topSelf.slice(0, 15)) console.log(`  ${f.percent.toFixed(1).padStart(5)} %  ${f.label}`);
}

if (options.analyse) {
  printProfile(summarise(JSON.parse(readFileSync(options.analyse, 'utf8')) as CpuProfile));
  process.exit(0);
}

const loadBefore = loadAverage();
console.log(`CPU profile of ${COMPILED} under c = ${options.connections} durable PUTs for ${options.seconds} s`);
const profile = await cpuProfile();
console.log(`  ${profile.load.rps.toFixed(0)} req/s while profiled; profile kept in ${profile.profileFile}`);
printProfile(profile);

console.log(`  CPU a request: ${profile.processCpuUsPerRequest} µs in all threads (/proc), ${profile.mainThreadBusyUsPerRequest} µs busy on the event loop (profile)`);
for (const [stage, us] of Object.entries(profile.stagesUsPerRequest).sort((a, b) => b[1] - a[1])) console.log(`  ${String(us).padStart(6)} µs  ${stage}`);

console.log('\nfsync calls under strace');
const fsync = options.profileOnly ? null : await fsyncCount();
if (fsync) console.log(`  ${fsync.fsyncsPerSecond} fsyncs/s, ${fsync.putsPerFsync} PUTs a fsync, ${(100 * fsync.shareOfWallTimeInFsync).toFixed(1)} % of the time in fsync (${fsync.load.rps.toFixed(0)} req/s under strace)`);
else console.log(options.profileOnly ? '  skipped (--profile-only)' : '  strace is not installed: skipped');

console.log('\nvariants, alternating');
const variantResults = options.profileOnly ? {} : await variants();
for (const [name, v] of Object.entries(variantResults)) {
  console.log(`  ${name}: ${v.rps.median.toFixed(0)} req/s (×${v.ratioToDefault.median.toFixed(2)} of default), p99 ${v.p99.median.toFixed(1)} ms`);
}

const resultsDir = join(ROOT, 'bench', 'results');
mkdirSync(resultsDir, { recursive: true });
const file = join(resultsDir, `${new Date().toISOString().slice(0, 10)}-profile.json`);
writeFileSync(
  file,
  `${JSON.stringify({ at: new Date().toISOString(), command: 'npm run bench:profile', options, load: { before: loadBefore, after: loadAverage() }, profile, fsync, variants: variantResults }, null, 2)}\n`,
);
console.log(`\nresults: ${relative(process.cwd(), file)}`);
