// The statelog server as a child process for the benchmarks, started exactly as in
// production (src/server.ts), with its resident memory read from /proc.
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { processSeconds } from './cpu-share.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

export interface ServerProcess {
  child: ChildProcess;
  base: string;
  /** Resident set size in bytes, now. */
  rss(): number;
  /** CPU time used so far (user + system), in seconds. */
  cpuSeconds(): number;
  /** SIGTERM, then waits for the exit; resolves with the exit code. */
  stop(): Promise<number | null>;
}

/** statelog (src/server.ts), or another entry that prints the same "Server listening at" line. */
export async function startServer(env: Record<string, string>, entry = 'src/server.ts'): Promise<ServerProcess> {
  // SERVER_NODE_ARGS adds flags for the server alone, such as --cpu-prof.
  const extra = process.env.SERVER_NODE_ARGS?.split(' ').filter(Boolean) ?? [];
  const child = spawn(process.execPath, [...extra, '--import', 'tsx', entry], {
    cwd: ROOT,
    env: { ...process.env, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let output = '';
  const base = await new Promise<string>((resolve, reject) => {
    child.stdout!.on('data', (chunk: Buffer) => {
      // Only start-up is read; access-log lines after it are dropped.
      if (output.length > 100_000) return;
      output += chunk.toString();
      const match = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(output);
      if (match) resolve(match[1]!);
    });
    child.on('exit', (code) => reject(new Error(`the server exited with ${code}: ${output}`)));
  });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return {
    child,
    base,
    rss() {
      const status = readFileSync(`/proc/${child.pid}/status`, 'utf8');
      return Number(/VmRSS:\s+(\d+) kB/.exec(status)![1]) * 1024;
    },
    cpuSeconds: () => processSeconds(child.pid!),
    async stop() {
      child.kill('SIGTERM');
      return exited;
    },
  };
}

export const mb = (bytes: number): number => Math.round((bytes / (1024 * 1024)) * 10) / 10;

/** Measures `count` times, each on a fresh server process, printing one line a run. */
export async function eachRun<T>(
  count: number,
  env: (run: number) => Record<string, string>,
  measure: (server: ServerProcess) => Promise<T>,
  describe: (result: T) => string,
): Promise<T[]> {
  const results: T[] = [];
  for (let i = 0; i < count; i++) {
    const server = await startServer(env(i));
    try {
      const result = await measure(server);
      results.push(result);
      console.log(`run ${i + 1}: ${describe(result)}`);
    } finally {
      await server.stop();
    }
  }
  return results;
}
