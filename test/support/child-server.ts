// The real server process (src/server.ts through tsx, as `npm start` runs it compiled),
// for tests of what only a process shows: start-up, logs, signals, exit codes, crashes.
// The launcher is harness/server-process.ts, shared with the benchmarks; these are its
// test defaults: a clean environment, quiet and quick.
import {
  launchServer,
  LISTENING_LINE,
  startServer as startProcess,
  type Exit,
  type ListeningServer as Listening,
  type ServerProcess,
} from '../../harness/server-process.js';

export type { Exit };
export type ChildServer = ServerProcess;
export type ListeningServer = Listening;
export type UrlServer = Listening;

/** No compaction timer and no load shedding unless a test asks (see test/support/helpers.ts). */
const QUIET = { STATELOG_COMPACT_INTERVAL_MS: '0', STATELOG_MAX_EVENT_LOOP_DELAY_MS: '0' };

/** Starts the server with only PATH and `env` (plus the quiet defaults) in its environment. */
export function runServer(env: Record<string, string>): ChildServer {
  return launchServer({ env: { PORT: '0', LOG_LEVEL: 'info', ...QUIET, ...env } });
}

/** Starts the server and waits until it has logged that it listens. */
export function startServer(env: Record<string, string>, timeoutMs = 20_000): Promise<ListeningServer> {
  return startProcess({ env: { LOG_LEVEL: 'info', ...QUIET, ...env }, timeoutMs, readyLine: LISTENING_LINE });
}

/** startServer, named for the tests that use its base URL. */
export const spawnServer = (env: Record<string, string>): Promise<UrlServer> => startServer(env);

/** Runs a server that is expected to stop by itself (a refused start-up), with its output. */
export async function runServerExpectingExit(env: Record<string, string>) {
  const child = runServer(env);
  const { code } = await child.exited;
  return { code, stdout: child.stdout(), stderr: child.stderr() };
}

export interface KillableServer {
  child: ServerProcess['proc'];
  url: string;
  /** What the server wrote to stdout and stderr so far. */
  output(): string;
  /** Resolves with the exit code (null when killed by a signal). */
  exited: Promise<number | null>;
  kill(signal: NodeJS.Signals): Promise<number | null>;
}

/**
 * The server at LOG_LEVEL=warn, for tests that kill it and look only at its exit code;
 * resolves once /healthz has answered (which the log at warn does not show).
 */
export async function startChildServer(env: Record<string, string>, timeoutMs = 30_000): Promise<KillableServer> {
  const server = await startProcess({ env: { LOG_LEVEL: 'warn', ...env }, timeoutMs });
  while (!(await fetch(`${server.url}/healthz`).then((res) => res.ok, () => false))) {
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  const exited = server.exited.then((exit) => exit.code);
  return {
    child: server.proc,
    url: server.url,
    output: () => server.stdout() + server.stderr(),
    exited,
    kill: (signal) => server.stop(signal).then((exit) => exit.code),
  };
}
