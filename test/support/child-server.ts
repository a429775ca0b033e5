// The real server process, compiled as `npm start` runs it (test/support/build-global-setup.ts),
// for tests of what only a process shows: start-up, logs, signals, exit codes, crashes.
// The launcher is harness/server-process.ts, shared with the benchmarks; these are its
// test defaults: a clean environment, quiet and quick.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach } from 'vitest';
import {
  launchServer,
  LISTENING_LINE,
  startServer as startProcess,
  type Exit,
  type ListeningServer as Listening,
  type ServerProcess,
} from '../../harness/server-process.js';
import { SERVER_ENTRY } from '../../harness/build.js';
import { testStore, type TestStore, type TestStoreOptions } from './store-access.js';

export type { Exit };
export type ChildServer = ServerProcess;
export type ListeningServer = Listening;
export type UrlServer = Listening;

/** No compaction timer and no load shedding unless a test asks (see test/support/helpers.ts). */
const QUIET = { STATELOG_COMPACT_INTERVAL_MS: '0', STATELOG_MAX_EVENT_LOOP_DELAY_MS: '0' };

/** Starts the server with only PATH and `env` (plus the quiet defaults) in its environment. */
export function runServer(env: Record<string, string>): ChildServer {
  return launchServer({ entry: SERVER_ENTRY, env: { PORT: '0', LOG_LEVEL: 'info', ...QUIET, ...env } });
}

/** Starts the server and waits until it has logged that it listens. */
export function startServer(env: Record<string, string>, timeoutMs = 20_000): Promise<ListeningServer> {
  return startProcess({ entry: SERVER_ENTRY, env: { LOG_LEVEL: 'info', ...QUIET, ...env }, timeoutMs, readyLine: LISTENING_LINE });
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
  const server = await startProcess({ entry: SERVER_ENTRY, env: { LOG_LEVEL: 'warn', ...env }, timeoutMs });
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

export interface ChildServers {
  /**
   * The test's database of the store under test (made on first use, with `options` then)
   * and the folder of its files.
   */
  database(options?: TestStoreOptions): Promise<TestStore>;
  readonly dir: string;
  /** A server on the test's database, with STATELOG_SYNC=full, the fixture's settings, then `env`. */
  start(env?: Record<string, string>): Promise<UrlServer>;
  /** SIGKILL, as a crash: resolves once the process is gone. */
  kill(server: UrlServer): Promise<void>;
}

/**
 * Servers in child processes on one database per test, for tests that kill them and
 * restart on the same database: after each test its servers are SIGKILLed, its database
 * dropped and its folder removed. Call at the file's top level.
 */
export function childServers(settings: Record<string, string> = {}): ChildServers {
  let dir: string | undefined;
  let database: TestStore | undefined;
  const servers: UrlServer[] = [];
  afterEach(async () => {
    for (const server of servers.splice(0)) server.proc.kill('SIGKILL');
    await database?.drop();
    database = undefined;
    if (dir) rmSync(dir, { recursive: true, force: true });
    dir = undefined;
  });
  const fixture: ChildServers = {
    get dir() {
      dir ??= mkdtempSync(join(tmpdir(), 'statelog-test-'));
      return dir;
    },
    async database(options) {
      database ??= await testStore(fixture.dir, undefined, undefined, options);
      return database;
    },
    async start(env = {}) {
      // A start-up may take long on a machine busy with other test files.
      const server = await startServer({ ...(await fixture.database()).env, STATELOG_SYNC: 'full', ...settings, ...env }, 60_000);
      servers.push(server);
      return server;
    },
    async kill(server) {
      server.proc.kill('SIGKILL');
      const exit = await server.exited;
      if (exit.signal !== 'SIGKILL') throw new Error(`the server exited by itself (${exit.code}) before the kill:\n${server.stderr()}`);
    },
  };
  return fixture;
}
