// The real server process (src/server.ts, as `npm start` runs it but through tsx), for
// tests of what only a process shows: start-up, logs, signals, exit codes, crashes.
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface ChildServer {
  proc: ChildProcess;
  /** Resolves when the process has exited. */
  exited: Promise<Exit>;
  /** Everything written to stdout and stderr so far. */
  stdout(): string;
  stderr(): string;
  /** stdout's JSON log lines. */
  logs(): Record<string, unknown>[];
}

export interface ListeningServer extends ChildServer {
  port: number;
  /** Sends a signal and waits for the exit. */
  stop(signal?: NodeJS.Signals): Promise<Exit>;
}

/**
 * Starts the server with a clean environment: only PATH and `env` (plus defaults that
 * keep tests quiet and quick), so nothing leaks in from the environment of the tests.
 */
export function runServer(env: Record<string, string>): ChildServer {
  const proc = spawn(process.execPath, ['--import', 'tsx', 'src/server.ts'], {
    cwd: ROOT,
    // No load shedding unless a test asks for it (see test/helpers.ts).
    env: { PATH: process.env.PATH, PORT: '0', LOG_LEVEL: 'info', STATELOG_COMPACT_INTERVAL_MS: '0', STATELOG_MAX_EVENT_LOOP_DELAY_MS: '0', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  proc.stdout!.setEncoding('utf8').on('data', (chunk: string) => (out += chunk));
  proc.stderr!.setEncoding('utf8').on('data', (chunk: string) => (err += chunk));
  const exited = new Promise<Exit>((resolve) => proc.once('exit', (code, signal) => resolve({ code, signal })));
  const logs = () =>
    out
      .split('\n')
      .filter((line) => line.startsWith('{'))
      .map((line) => JSON.parse(line) as Record<string, unknown>);
  return { proc, exited, stdout: () => out, stderr: () => err, logs };
}

/** Starts the server and waits until it listens (its info log says on which port). */
export async function startServer(env: Record<string, string>, timeoutMs = 20_000): Promise<ListeningServer> {
  const child = runServer(env);
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const listening = child
      .logs()
      .map((line) => /^Server listening at https?:\/\/127\.0\.0\.1:(\d+)$/.exec(String(line.msg)))
      .find(Boolean);
    if (listening) {
      const stop = async (signal: NodeJS.Signals = 'SIGTERM') => {
        child.proc.kill(signal);
        return child.exited;
      };
      return { ...child, port: Number(listening[1]), stop };
    }
    if (child.proc.exitCode !== null || Date.now() > deadline) {
      child.proc.kill('SIGKILL');
      throw new Error(`the server did not start:\n${child.stdout()}\n${child.stderr()}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

export type UrlServer = ListeningServer & { url: string };

/** startServer, with the server's base URL. */
export async function spawnServer(env: Record<string, string>): Promise<UrlServer> {
  const server = await startServer(env);
  return { ...server, url: `http://127.0.0.1:${server.port}` };
}

/** Runs a server that is expected to stop by itself (a refused start-up), with its output. */
export async function runServerExpectingExit(env: Record<string, string>) {
  const child = runServer(env);
  const { code } = await child.exited;
  return { code, stdout: child.stdout(), stderr: child.stderr() };
}
