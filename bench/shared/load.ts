// The suite's HTTP load generator: autocannon's closed loop (each connection sends its
// next request as soon as the last is answered), spread over child processes so that the
// client is not what limits a fast server, with latency recorded in microseconds. The
// reference it is held to is the autocannon command line, one process, on the same
// route: bench/writes/generator.ts measures both in one run.
import { fork, spawn } from 'node:child_process';
import { cpus } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import hdr from 'hdr-histogram-js';
import type { HttpRequest, LoopResult } from './closed-loop.js';
import { ROOT } from './lib.js';

/**
 * Processes of the generator: BENCH_GENERATOR_THREADS, else half the cores (the server
 * under test gets the other half). On 2 cores one process is the autocannon command
 * line's own setting; a second one only takes CPU from the server it measures.
 */
export function generatorThreads(connections: number): number {
  const asked = Number(process.env.BENCH_GENERATOR_THREADS ?? Math.max(1, Math.floor(cpus().length / 2)));
  if (!Number.isInteger(asked) || asked < 1) throw new Error('BENCH_GENERATOR_THREADS must be a positive integer');
  return Math.max(1, Math.min(asked, connections));
}

/** `count` requests from `next`, built before the load so the generator only sends. */
export function prebuilt(next: () => HttpRequest, count = 1000): HttpRequest[] {
  return Array.from({ length: count }, next);
}

export interface LoadOptions {
  url: string;
  connections: number;
  seconds: number;
  /** Each connection sends these in its own shuffled order, over and over. */
  requests: HttpRequest[];
  threads?: number;
  /** Seconds before a request counts as timed out (autocannon's default: 10). */
  timeoutSeconds?: number;
  /** Requests a second in all, spread over the threads; unset: as fast as answered. */
  rate?: number;
}

interface ThreadResult {
  ok: number;
  elapsed: number;
  histogram: string;
  errors: number;
  non2xx: number;
  firstFailure: string | null;
  cpuSeconds: number;
}

/** A load's result, with the cores its generator processes used on average (1 = one core all the time). */
export interface LoadResult extends LoopResult {
  generatorCores: number;
}

function runThread(url: string, connections: number, seconds: number, requests: HttpRequest[], timeout: number, rate: number | null): Promise<ThreadResult> {
  return new Promise((resolve, reject) => {
    // Plain node, without the runner's tsx loader or flags.
    const child = fork(fileURLToPath(new URL('./load-worker.mjs', import.meta.url)), [], { execArgv: [], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    let result: ThreadResult | undefined;
    child.once('message', (message) => (result = message as ThreadResult));
    child.once('error', reject);
    child.once('exit', (code) => (result ? resolve(result) : reject(new Error(`a load process exited with ${code} before reporting`))));
    child.send({ url, connections, seconds, requests, timeout, rate });
  });
}

/**
 * `connections` keep-alive connections over `threads` threads for `seconds`. Anything but
 * a 2xx answer, a connection error or a timeout counts in `errors` and not in `rps`.
 */
export async function load(options: LoadOptions): Promise<LoadResult> {
  const threads = options.threads ?? generatorThreads(options.connections);
  const shares = Array.from({ length: threads }, (_, i) => Math.floor(options.connections / threads) + (i < options.connections % threads ? 1 : 0));
  const rate = options.rate === undefined ? null : options.rate / threads;
  const results = await Promise.all(
    shares.map((connections) => runThread(options.url, connections, options.seconds, options.requests, options.timeoutSeconds ?? 10, rate)),
  );
  const histogram = hdr.build({ lowestDiscernibleValue: 1, highestTrackableValue: 60_000_000, numberOfSignificantValueDigits: 3 });
  for (const r of results) histogram.add(hdr.decodeFromCompressedBase64(r.histogram));
  const errors = results.reduce((n, r) => n + r.errors + r.non2xx, 0);
  if (errors > 0) console.warn(`  ${errors} failed requests, the first: ${results.find((r) => r.firstFailure)?.firstFailure ?? 'unknown'}`);
  const requests = results.reduce((n, r) => n + r.ok, 0);
  return {
    requests,
    rps: results.reduce((sum, r) => sum + r.ok / r.elapsed, 0),
    p50: histogram.getValueAtPercentile(50) / 1000,
    p99: histogram.getValueAtPercentile(99) / 1000,
    errors,
    generatorCores: results.reduce((sum, r) => sum + r.cpuSeconds, 0) / Math.max(...results.map((r) => r.elapsed)),
  };
}

/** The same load, one request made by `next` at a time (for the figures that build them). */
export function loadOf(url: string, connections: number, seconds: number, next: () => HttpRequest): Promise<LoadResult> {
  return load({ url, connections, seconds, requests: prebuilt(next) });
}

/**
 * The reference: the autocannon command line, one process, the same request every time
 * (`autocannon -c N -d S -m PUT -H content-type=application/json -b BODY URL --json`).
 * Its p50 and p99 are autocannon's whole milliseconds.
 */
export function autocannonCli(url: string, connections: number, seconds: number, request: HttpRequest): Promise<LoopResult & { command: string }> {
  const args = ['-c', String(connections), '-d', String(seconds), '-m', request.method, '--json'];
  if (request.body !== undefined) args.push('-H', 'content-type=application/json', '-b', request.body);
  args.push(`${url}${request.path}`);
  const bin = join(ROOT, 'node_modules', 'autocannon', 'autocannon.js');
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [bin, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
    child.once('error', reject);
    child.once('exit', (code) => {
      if (code !== 0) return reject(new Error(`autocannon exited with ${code}: ${err.slice(-500)}`));
      const r = JSON.parse(out) as { duration: number; '2xx': number; errors: number; timeouts: number; non2xx: number; latency: { p50: number; p99: number } };
      resolve({
        requests: r['2xx'],
        rps: r['2xx'] / r.duration,
        p50: r.latency.p50,
        p99: r.latency.p99,
        errors: r.errors + r.timeouts + r.non2xx,
        command: `autocannon ${args.map((a) => (/[\s{}"]/.test(a) ? `'${a}'` : a)).join(' ')}`,
      });
    });
  });
}
