// Runs the statelog command as a child process, as a shell user would: its compiled
// JavaScript, as `npm link` installs it (built by test/support/build-global-setup.ts).
import { execFile, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { CLI_ENTRY } from '../../harness/build.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

export function cli(args: string[], env: Record<string, string> = {}, input?: string): Promise<CliResult> {
  return new Promise((resolve) => {
    const child = execFile(
      process.execPath,
      [CLI_ENTRY, ...args],
      { cwd: ROOT, env: { ...process.env, ...env }, timeout: 20_000 },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === 'number' ? error.code : 1) : 0;
        resolve({ code, stdout, stderr });
      },
    );
    if (input !== undefined) child.stdin!.end(input);
    else child.stdin!.end();
  });
}

export const NODE_ARGS = [CLI_ENTRY];

/**
 * Runs `statelog ARGS | READER` in bash: the command's own exit code (not the
 * reader's), its stderr, and what the reader printed.
 */
export function cliPiped(args: string[], reader: string, env: Record<string, string> = {}): Promise<CliResult> {
  const quoted = [process.execPath, ...NODE_ARGS, ...args].map((arg) => `'${arg.replaceAll("'", "'\\''")}'`).join(' ');
  const script = `${quoted} | ${reader}; exit "\${PIPESTATUS[0]}"`;
  return new Promise((resolve) => {
    const child = spawn('bash', ['-c', script], { cwd: ROOT, env: { ...process.env, ...env } });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    child.on('exit', (code) => resolve({ code: code ?? -1, stdout, stderr }));
  });
}

/** The statelog command as a long-running child (tail), its output gathered as it comes. */
export function cliProcess(args: string[], env: Record<string, string> = {}) {
  const child = spawn(process.execPath, [...NODE_ARGS, ...args], { cwd: ROOT, env: { ...process.env, ...env } });
  const output = { stdout: '', stderr: '' };
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (output.stdout += chunk));
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (output.stderr += chunk));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { child, output, exited };
}
