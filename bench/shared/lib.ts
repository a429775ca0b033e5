// Shared pieces of the benchmarks: servers in child processes, cached pre-filled logs,
// statistics and small helpers. Every bench script imports from here.
import type { ChildProcess } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import Database from 'better-sqlite3';
import { SERVER_ENTRY } from '../../harness/build.js';
import { fillLog } from '../../harness/fill-log.js';
import { freePort, startServer, type ListeningServer } from '../../harness/server-process.js';

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));

/** True when the module at `moduleUrl` is the script node was started with. */
export function isMain(moduleUrl: string): boolean {
  return process.argv[1] !== undefined && moduleUrl === pathToFileURL(process.argv[1]).href;
}

/** A positive number from the environment, or `fallback`. */
export function envNumber(name: string, fallback: number): number {
  const value = Number(process.env[name] ?? fallback);
  if (!Number.isFinite(value) || value <= 0) throw new Error(`${name} must be a positive number`);
  return value;
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

// ---------------------------------------------------------------- servers

export interface Server {
  url: string;
  proc: ChildProcess;
  stop(): Promise<void>;
}

export { freePort };

export interface StartOptions {
  /** Options for node itself (--cpu-prof ...). */
  nodeArgs?: string[];
  /** Runs once the process has exited. */
  cleanup?: () => void;
  /** A command node runs under (strace ...); stop() then signals node, not the wrapper. */
  wrapper?: string[];
  /** The server's stdout: shown (default), or dropped. */
  output?: 'inherit' | 'discard';
  /** How long it may take to listen (default 60 s; more under valgrind). */
  startupMs?: number;
}

/**
 * Starts an entry point (TypeScript through tsx, or compiled JavaScript) on a free port
 * and waits until it listens (harness/server-process.ts, as the tests do).
 */
export async function startNode(entry: string, env: Record<string, string>, options: StartOptions = {}): Promise<Server> {
  let server: ListeningServer;
  try {
    server = await startServer({
      entry,
      inheritEnv: true,
      // Per-request logging is off in benchmarks, for statelog and the baseline alike.
      env: { LOG_LEVEL: 'warn', ...env },
      nodeArgs: options.nodeArgs,
      wrapper: options.wrapper,
      output: options.output === 'discard' ? 'quiet' : 'inherit',
      timeoutMs: options.startupMs ?? 60_000,
    });
  } catch (err) {
    options.cleanup?.();
    throw err;
  }
  const exit = server.exited.then(() => options.cleanup?.());
  return {
    url: server.url,
    proc: server.proc,
    stop: async () => {
      await server.stop();
      await exit;
    },
  };
}

/**
 * A statelog server (the compiled dist/server.js, as `npm start` runs it and bench/run.ts
 * builds it, unless `options.entry` names another, such as src/server.ts through tsx,
 * which serves fewer requests a second; STATELOG_SYNC=full unless `env` says otherwise, no compaction timer)
 * on a fresh database in a temporary folder, or on `env.STATELOG_DB`. The temporary
 * folder is removed when the server stops.
 */
export function startStatelog(env: Record<string, string> = {}, options: StartOptions & { entry?: string } = {}): Promise<Server> {
  const dir = env.STATELOG_DB ? null : mkdtempSync(join(tmpdir(), 'statelog-bench-'));
  return startNode(
    options.entry ?? SERVER_ENTRY,
    { STATELOG_SYNC: 'full', STATELOG_COMPACT_INTERVAL_MS: '0', ...(dir ? { STATELOG_DB: join(dir, 'bench.db') } : {}), ...env },
    { ...options, cleanup: () => dir && rmSync(dir, { recursive: true, force: true }) },
  );
}

/** The bare fastify baseline: the same PUT and GET routes and schemas, no store. */
export function startBare(): Promise<Server> {
  return startNode('bench/writes/bare-server.ts', {});
}

// ---------------------------------------------------------------- pre-filled logs

/** Scratch space for the large databases: BENCH_DIR, or a folder in the system's temp. */
export const BENCH_DIR = process.env.BENCH_DIR ?? join(tmpdir(), 'statelog-bench');

function removeDb(path: string): void {
  // With the server's process lock (src/store/sqlite/process-lock.ts), which outlives it.
  for (const suffix of ['', '-wal', '-shm', '.lock']) rmSync(`${path}${suffix}`, { force: true });
}

/**
 * A log of `records` records over `keys` keys (each key records / keys versions), filled
 * once and kept in BENCH_DIR: filling 10,000,000 records takes a while. Filled under a
 * temporary name and renamed, so two runs never see a half-filled file.
 */
export function filledTemplate(records: number, keys: number, log: (line: string) => void = console.log): string {
  mkdirSync(BENCH_DIR, { recursive: true });
  const path = join(BENCH_DIR, `log-${records}-${keys}.db`);
  if (existsSync(path)) {
    const db = new Database(path, { readonly: true });
    const head = db.prepare('SELECT head FROM meta').pluck().get();
    db.close();
    if (head === records) return path;
  }
  const partial = `${path}.${process.pid}.filling`;
  removeDb(partial);
  const started = performance.now();
  fillLog(partial, { records, keys });
  removeDb(path);
  renameSync(partial, path);
  removeDb(partial);
  log(`filled ${records.toLocaleString()} records over ${keys.toLocaleString()} keys in ${secondsText(performance.now() - started)} s`);
  return path;
}

/** A fresh copy of `template` for this process to change; `dispose` removes it. */
export function workingCopy(template: string, name: string): { path: string; dispose(): void } {
  const path = join(BENCH_DIR, `${name}-${process.pid}.db`);
  removeDb(path);
  copyFileSync(template, path);
  return { path, dispose: () => removeDb(path) };
}

// ---------------------------------------------------------------- statistics

export function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.max(0, Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

/**
 * The `p`th percentile of a histogram of delays in buckets of `bucketMs` each (bucket i
 * holds [i, i + 1) × bucketMs), as the upper bound of its bucket.
 */
export function histogramPercentile(histogram: number[], p: number, bucketMs: number): number {
  const total = histogram.reduce((a, b) => a + b, 0);
  let seen = 0;
  for (let bucket = 0; bucket < histogram.length; bucket++) {
    seen += histogram[bucket]!;
    if (seen >= (p / 100) * total) return round((bucket + 1) * bucketMs, 1);
  }
  return NaN;
}

/** The median (the mean of the two middle values for an even count). */
export function median(values: number[]): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

export interface Summary {
  median: number;
  min: number;
  max: number;
  runs: number[];
}

export function summary(values: number[]): Summary {
  return { median: median(values), min: Math.min(...values), max: Math.max(...values), runs: values };
}

export const round = (value: number, digits = 2) => Number(value.toFixed(digits));

/** Writes bench/results/<name>.json (for the scripts that are not figures of the suite). */
export function saveResult(name: string, result: object): void {
  const dir = join(ROOT, 'bench', 'results');
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, `${name}.json`), `${JSON.stringify(result, null, 2)}\n`);
}

export const secondsText = (ms: number) => (ms / 1000).toFixed(1);

// ---------------------------------------------------------------- HTTP without limits

/**
 * A request without a time limit (fetch gives up on headers after 300 s, and a large
 * compaction answers only when done). Resolves with the status and the parsed body.
 */
export function httpJson(method: string, url: string, body?: unknown): Promise<{ status: number; body: unknown }> {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const headers: Record<string, string | number> = payload === undefined ? {} : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) };
    const req = request(url, { method, headers }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text ? JSON.parse(text) : null }));
    });
    req.on('error', reject);
    req.end(payload);
  });
}
