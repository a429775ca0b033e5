// The statelog server as a child process for the benchmarks, started exactly as in
// production (the compiled dist/server.js) by harness/server-process.ts, with its resident memory
// read from /proc.
import type { ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { SERVER_ENTRY } from '../../harness/build.js';
import { LISTENING_LINE, startServer as startProcess } from '../../harness/server-process.js';
import { processSeconds } from './cpu-share.js';

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

/** statelog (compiled, as bench/shared/lib.ts's startStatelog), or another entry that logs the same "Server listening at" line. */
export async function startServer(env: Record<string, string>, entry = SERVER_ENTRY): Promise<ServerProcess> {
  const server = await startProcess({
    entry,
    inheritEnv: true,
    env: { LOG_LEVEL: 'info', ...env },
    // SERVER_NODE_ARGS adds flags for the server alone, such as --cpu-prof.
    nodeArgs: process.env.SERVER_NODE_ARGS?.split(' ').filter(Boolean) ?? [],
    // Only start-up is of interest; the access log after it is not kept.
    maxCaptured: 100_000,
    timeoutMs: 60_000,
    readyLine: LISTENING_LINE,
  });
  const child = server.proc;
  return {
    child,
    base: server.url,
    rss() {
      const status = readFileSync(`/proc/${child.pid}/status`, 'utf8');
      return Number(/VmRSS:\s+(\d+) kB/.exec(status)![1]) * 1024;
    },
    cpuSeconds: () => processSeconds(child.pid!),
    async stop() {
      return (await server.stop()).code;
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
