// Compiles the server and the command-line client as `npm start` and `npm link` run them
// (dist/ and the client package's build). Incremental: with nothing changed it costs a
// check of the sources, not a compile.
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { ROOT } from './server-process.js';

/** The compiled entry points, relative to the repository's root. */
export const SERVER_ENTRY = 'dist/server.js';
export const CLI_ENTRY = 'dist/cli.js';

function run(command: string, args: string[]): void {
  try {
    execFileSync(command, args, { cwd: ROOT, stdio: 'pipe' });
  } catch (err) {
    const { stdout, stderr } = err as { stdout?: Buffer; stderr?: Buffer };
    throw new Error(`the build failed (${[command, ...args].join(' ')}):\n${stdout ?? ''}${stderr ?? ''}`, { cause: err });
  }
}

/** dist/: the server and the command line. The client package's types must be built (npm ci does). */
export function buildServer(): void {
  run(process.execPath, [createRequire(import.meta.url).resolve('typescript/bin/tsc'), '-p', 'tsconfig.json', '--incremental']);
}

/** The client package, which the command line imports. Not incremental: it rewrites its files. */
export function buildClient(): void {
  run('npm', ['run', 'build', '--silent', '-w', '@statelog/client']);
}
