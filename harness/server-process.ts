// The statelog server (or another HTTP entry point) in a child process, for the tests
// and the benchmarks alike: started as in production, watched from outside, stopped by
// a signal.
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { connect, createServer, type AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';

export const ROOT = fileURLToPath(new URL('..', import.meta.url));

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface LaunchOptions {
  /** The entry point: TypeScript runs through tsx, JavaScript (dist/server.js) as it is. */
  entry?: string;
  env?: Record<string, string>;
  /**
   * Start from this process's environment. Without it the child gets PATH and `env`
   * alone, so nothing leaks in from the environment of the tests.
   */
  inheritEnv?: boolean;
  /** Flags for node itself (--cpu-prof ...). */
  nodeArgs?: string[];
  /** A command node runs under (strace ...); stop() then signals node, not the wrapper. */
  wrapper?: string[];
  /** Kept for stdout()/stderr()/logs() (default); shown; or 'quiet': the log (stdout) dropped, stderr shown. */
  output?: 'capture' | 'inherit' | 'quiet';
  /** Captured output stops growing past this many characters (long benchmark runs). */
  maxCaptured?: number;
}

export interface ServerProcess {
  proc: ChildProcess;
  /** Resolves when the process has exited. */
  exited: Promise<Exit>;
  /** What was captured of stdout and stderr so far. */
  stdout(): string;
  stderr(): string;
  /** stdout's JSON log lines. */
  logs(): Record<string, unknown>[];
  /** Sends the signal (SIGTERM by default) and waits for the exit. */
  stop(signal?: NodeJS.Signals): Promise<Exit>;
}

export interface ListeningServer extends ServerProcess {
  port: number;
  url: string;
}

/** Binds `port` (0: the kernel's pick) on 127.0.0.1 and lets it go: the port, or null if it was taken. */
function probePort(port: number): Promise<number | null> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', (err: NodeJS.ErrnoException) => (port !== 0 && err.code === 'EADDRINUSE' ? resolve(null) : reject(err)));
    probe.listen(port, '127.0.0.1', () => {
      const { port: bound } = probe.address() as AddressInfo;
      probe.close(() => resolve(bound));
    });
  });
}

/** The lowest port the kernel gives outgoing connections (Linux), or null where that is unknown. */
function ephemeralPortsFrom(): number | null {
  try {
    const low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    return Number.isInteger(low) ? low : null;
  } catch {
    return null;
  }
}

/** Where freePort looks first: below the ephemeral range, above the ports services usually take. */
const PICKED_FROM = 10_000;

/**
 * A port on 127.0.0.1 that was free a moment ago. Picked below the kernel's ephemeral range
 * where it can: one the kernel picks is in that range, and an outgoing connection (a client
 * retrying, a health check) may take it before the server it was picked for binds it.
 */
export async function freePort(): Promise<number> {
  const below = ephemeralPortsFrom();
  for (let attempt = 0; below !== null && below > PICKED_FROM + 1000 && attempt < 20; attempt++) {
    const port = await probePort(PICKED_FROM + Math.floor(Math.random() * (below - PICKED_FROM)));
    if (port !== null) return port;
  }
  return (await probePort(0))!;
}

/** The line fastify logs (at info) once the server listens. */
export const LISTENING_LINE = /Server listening at https?:\/\/[^\s"]+/;

/** Starts the process and returns at once (for start-ups that are expected to fail). */
export function launchServer(options: LaunchOptions = {}): ServerProcess {
  const entry = options.entry ?? 'src/server.ts';
  const nodeArgs = [...(entry.endsWith('.ts') ? ['--import', 'tsx'] : []), ...(options.nodeArgs ?? []), entry];
  const [command, ...args] = [...(options.wrapper ?? []), process.execPath, ...nodeArgs];
  const base = options.inheritEnv ? process.env : { PATH: process.env.PATH };
  const output = options.output ?? 'capture';
  const proc = spawn(command!, args, {
    cwd: ROOT,
    env: { ...base, ...options.env },
    stdio: ['ignore', output === 'inherit' ? 'inherit' : 'pipe', output === 'capture' ? 'pipe' : 'inherit'],
  });
  const max = options.maxCaptured ?? Infinity;
  let out = '';
  let err = '';
  if (output === 'capture') {
    proc.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
      if (out.length < max) out += chunk;
    });
    proc.stderr!.setEncoding('utf8').on('data', (chunk: string) => {
      if (err.length < max) err += chunk;
    });
  } else {
    proc.stdout?.resume();
  }
  const exited = new Promise<Exit>((resolve) => proc.once('exit', (code, signal) => resolve({ code, signal })));
  const logs = () =>
    out
      .split('\n')
      .filter((line) => line.startsWith('{'))
      .map((line) => JSON.parse(line) as Record<string, unknown>);
  const stop = (signal: NodeJS.Signals = 'SIGTERM') => {
    if (proc.exitCode === null && proc.signalCode === null) {
      // Under a wrapper, node is the wrapper's child: signal it, and the wrapper ends with it.
      const child = options.wrapper ? Number(readFileSync(`/proc/${proc.pid}/task/${proc.pid}/children`, 'utf8').trim().split(' ')[0]) : 0;
      if (child > 0) process.kill(child, signal);
      else proc.kill(signal);
    }
    return exited;
  };
  return { proc, exited, stdout: () => out, stderr: () => err, logs, stop };
}

/** Whether something accepts TCP connections on the port (no request is sent). */
function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

export interface StartOptions extends LaunchOptions {
  timeoutMs?: number;
  /**
   * Ready once stdout has this line (fastify's "Server listening at"), so that every
   * line logged during start-up has been read; otherwise once the port accepts
   * connections. Neither sends a request that would show in the server's log.
   */
  readyLine?: RegExp;
}

/**
 * Starts the process on a free port (or env.PORT) and waits until it is ready; throws
 * with its output if it exits first or takes longer than `timeoutMs`.
 */
export async function startServer(options: StartOptions = {}): Promise<ListeningServer> {
  const given = Number(options.env?.PORT ?? 0);
  const port = given > 0 ? given : await freePort();
  const server = launchServer({ ...options, env: { HOST: '127.0.0.1', ...options.env, PORT: String(port) } });
  const url = `http://127.0.0.1:${port}`;
  const timeoutMs = options.timeoutMs ?? 30_000;
  const deadline = Date.now() + timeoutMs;
  let exit: Exit | undefined;
  void server.exited.then((e) => (exit = e));
  for (;;) {
    if (exit) throw new Error(`${options.entry ?? 'the server'} exited (${exit.code ?? exit.signal}) before listening:\n${server.stdout()}\n${server.stderr()}`);
    if (Date.now() > deadline) {
      server.proc.kill('SIGKILL');
      throw new Error(`${options.entry ?? 'the server'} did not answer within ${timeoutMs} ms:\n${server.stdout()}\n${server.stderr()}`);
    }
    if (options.readyLine) {
      const line = options.readyLine.exec(server.stdout());
      // The line names the scheme: https when the server was given a certificate.
      if (line) return { ...server, port, url: line[0].includes('https://') ? url.replace('http:', 'https:') : url };
    } else if (await accepts(port)) {
      return { ...server, port, url };
    }
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}
