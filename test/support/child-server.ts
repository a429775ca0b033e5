// A real statelog server in a child process, for crash and shutdown tests.
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

export interface ChildServer {
  proc: ChildProcess;
  url: string;
  /** Resolves with the exit code (null when killed by a signal) and the signal. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Everything the process wrote to stderr. */
  stderr(): string;
}

export async function spawnServer(env: Record<string, string>): Promise<ChildServer> {
  const proc = spawn(process.execPath, ['--import', 'tsx', 'src/server.ts'], {
    cwd: ROOT,
    // The listening line (info) tells the port, so the level stays at info.
    env: { ...process.env, PORT: '0', HOST: '127.0.0.1', ...env, LOG_LEVEL: 'info' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  proc.stderr!.on('data', (chunk) => (stderr += chunk));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    proc.on('exit', (code, signal) => resolve({ code, signal })),
  );
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    const onData = (chunk: Buffer) => {
      out += chunk;
      const match = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(out);
      if (match) {
        proc.stdout!.off('data', onData);
        proc.stdout!.resume();
        resolve(match[1]!);
      }
    };
    proc.stdout!.on('data', onData);
    void exited.then(({ code }) => reject(new Error(`server exited with ${code} before listening: ${stderr}`)));
  });
  return { proc, url, exited, stderr: () => stderr };
}

/** Runs `spawnServer` with a command that is expected to fail at start-up. */
export async function runServerExpectingExit(env: Record<string, string>) {
  const proc = spawn(process.execPath, ['--import', 'tsx', 'src/server.ts'], {
    cwd: ROOT,
    env: { ...process.env, PORT: '0', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  proc.stdout!.on('data', (chunk) => (stdout += chunk));
  proc.stderr!.on('data', (chunk) => (stderr += chunk));
  const code = await new Promise<number | null>((resolve) => proc.on('exit', resolve));
  return { code, stdout, stderr };
}
