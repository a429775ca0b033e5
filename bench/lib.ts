// Shared pieces of the benchmarks: real servers in child processes, autocannon runs,
// medians, and results written as JSON under bench/results/.
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer, type AddressInfo } from 'node:net';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';

export const ROOT = fileURLToPath(new URL('../', import.meta.url));

export interface Server {
  url: string;
  proc: ChildProcess;
  stop(): Promise<void>;
}

/** A port that was free a moment ago. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as AddressInfo;
      probe.close(() => resolve(port));
    });
  });
}

/** Starts a TypeScript entry point with tsx on a free port and waits until it answers. */
export async function startNode(entry: string, env: Record<string, string>): Promise<Server> {
  const port = await freePort();
  const proc = spawn(process.execPath, ['--import', 'tsx', entry], {
    cwd: ROOT,
    // Per-request logging is off in benchmarks, for statelog and the baseline alike.
    env: { ...process.env, LOG_LEVEL: 'warn', ...env, PORT: String(port), HOST: '127.0.0.1' },
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  let exited = false;
  proc.once('exit', () => (exited = true));
  const url = `http://127.0.0.1:${port}`;
  for (;;) {
    if (exited) throw new Error(`${entry} exited before answering`);
    try {
      await fetch(`${url}/healthz`);
      break;
    } catch {
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
  return {
    url,
    proc,
    stop: () =>
      new Promise((resolve) => {
        if (exited) return resolve();
        proc.once('exit', () => resolve());
        proc.kill('SIGTERM');
      }),
  };
}

/** A statelog server on a fresh database in a temporary folder. */
export function startStatelog(env: Record<string, string> = {}): Promise<Server> {
  const dir = mkdtempSync(join(tmpdir(), 'statelog-bench-'));
  return startNode('src/server.ts', {
    STATELOG_DB: join(dir, 'bench.db'),
    STATELOG_COMPACT_INTERVAL_MS: '0',
    ...env,
  });
}

export interface LoadResult {
  requests: number;
  rps: number;
  p50: number;
  p99: number;
  non2xx: number;
  errors: number;
}

export async function load(options: autocannon.Options): Promise<LoadResult> {
  const result = await autocannon(options);
  return {
    requests: result.requests.total,
    rps: result.requests.average,
    p50: result.latency.p50,
    p99: result.latency.p99,
    non2xx: result.non2xx,
    errors: result.errors + result.timeouts,
  };
}

/** Keys the PUT load spreads over. */
export const PUT_KEYS = 10_000;

/** Durable PUTs of a small object to random keys, with `connections` in flight. */
export function durablePuts(url: string, connections: number, seconds: number): Promise<LoadResult> {
  return load({
    url,
    connections,
    duration: seconds,
    requests: [
      {
        method: 'PUT',
        headers: { 'content-type': 'application/json' },
        setupRequest: (req) => ({
          ...req,
          path: `/v1/keys/user_${Math.floor(Math.random() * PUT_KEYS)}`,
          body: `{"value":{"balance":${Math.floor(Math.random() * 1e6)},"currency":"EUR"}}`,
        }),
      },
    ],
  });
}

export function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

export function summary(values: number[]) {
  return { median: median(values), min: Math.min(...values), max: Math.max(...values), runs: values };
}

export function machine() {
  return { node: process.version, cpus: cpus().length, cpu: cpus()[0]?.model ?? 'unknown', platform: process.platform };
}

/** Writes bench/results/<name>-<date>.json and returns its path. */
export function saveResult(name: string, data: unknown): string {
  const dir = join(ROOT, 'bench', 'results');
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `${name}-${new Date().toISOString().slice(0, 10)}.json`);
  writeFileSync(file, `${JSON.stringify({ name, at: new Date().toISOString(), machine: machine(), ...(data as object) }, null, 2)}\n`);
  return file;
}

export function flag(name: string, fallback: number): number {
  const index = process.argv.indexOf(`--${name}`);
  return index >= 0 ? Number(process.argv[index + 1]) : fallback;
}
