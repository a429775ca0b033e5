// vitest globalSetup of both projects: compiles the server and the command-line client as
// `npm start` and `npm link` run them (dist/ and the client package's build), once before
// any file runs. The tests' child processes then start from that JavaScript, as in
// production, instead of compiling the TypeScript through tsx at each of the suite's many
// process starts, which cost more than a second of CPU each.
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { ROOT } from '../../harness/server-process.js';

/** The compiled entry points, relative to the repository's root. */
export const SERVER_ENTRY = 'dist/server.js';
export const CLI_ENTRY = 'dist/cli.js';

function run(command: string, args: string[]): void {
  try {
    execFileSync(command, args, { cwd: ROOT, stdio: 'pipe' });
  } catch (err) {
    const { stdout, stderr } = err as { stdout?: Buffer; stderr?: Buffer };
    throw new Error(`the build for the tests failed (${[command, ...args].join(' ')}):\n${stdout ?? ''}${stderr ?? ''}`, { cause: err });
  }
}

export default function setup(): void {
  run('npm', ['run', 'build', '--silent', '-w', '@statelog/client']);
  // Incremental, as `npm start` builds: a second project's setup finds nothing to do.
  run(process.execPath, [createRequire(import.meta.url).resolve('typescript/bin/tsc'), '-p', 'tsconfig.json', '--incremental']);
}
