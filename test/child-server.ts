// The real server in a child process (node --import tsx src/server.ts), for tests and
// benchmarks that kill it or measure it from outside.
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

export interface ChildServer {
  child: ChildProcess;
  url: string;
  /** Log lines (JSON) the server wrote so far. */
  lines: Array<Record<string, unknown>>;
  /** Resolves with the exit code (null when killed by a signal). */
  exited: Promise<number | null>;
  kill(signal: NodeJS.Signals): Promise<number | null>;
}

/** Starts the server with `env` on a free port; resolves once it listens. */
export function startChildServer(env: Record<string, string>, timeoutMs = 30_000): Promise<ChildServer> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/server.ts'], {
    cwd: ROOT,
    env: { PATH: process.env.PATH, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: Array<Record<string, unknown>> = [];
  let stderr = '';
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => fail(new Error(`the server did not start in ${timeoutMs} ms: ${stderr}`)), timeoutMs);
    const fail = (err: Error) => {
      clearTimeout(timer);
      child.kill('SIGKILL');
      reject(err);
    };
    let pending = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      pending += chunk.toString();
      const complete = pending.split('\n');
      pending = complete.pop()!;
      for (const text of complete) {
        if (!text.startsWith('{')) continue;
        const line = JSON.parse(text) as Record<string, unknown>;
        lines.push(line);
        const listening = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(String(line.msg));
        if (listening) {
          clearTimeout(timer);
          resolve({
            child,
            url: listening[1]!,
            lines,
            exited,
            kill: (signal) => {
              child.kill(signal);
              return exited;
            },
          });
        }
      }
    });
    void exited.then((code) => fail(new Error(`the server exited with ${code} before listening: ${stderr}`)));
  });
}
