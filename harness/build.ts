// Compiles the server and the command-line client as `npm start` and `npm link` run them
// (dist/ and the client package's build). With nothing changed it costs a digest of the
// sources, not a compile: every tier's setup asks for both.
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
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

/** What dist/ is compiled from: the sources, the client they import, the settings and the lockfile. */
const SERVER_INPUTS = ['src', 'packages/client/src', 'packages/client/package.json', 'tsconfig.json', 'package-lock.json'];
const SERVER_STAMP = 'node_modules/.cache/statelog/server-build.sha256';

/**
 * dist/: the server and the command line. The client package's types must be built (npm ci
 * does). Incremental, and skipped when its inputs are those of the last build: tsc's own
 * check of an unchanged tree still takes some 2 s, at every tier's setup.
 */
export function buildServer(): void {
  skipWhenBuilt(SERVER_INPUTS, [SERVER_ENTRY, CLI_ENTRY], SERVER_STAMP, () =>
    run(process.execPath, [createRequire(import.meta.url).resolve('typescript/bin/tsc'), '-p', 'tsconfig.json', '--incremental']),
  );
}

/** What the client's bundle and types are made of: its sources, the contract they import, the settings and the lockfile. */
const CLIENT_INPUTS = ['packages/client/src', 'src/contract', 'packages/client/package.json', 'packages/client/tsconfig.json', 'tsconfig.json', 'package-lock.json'];
const CLIENT_OUTPUTS = ['packages/client/dist/index.js', 'packages/client/dist/index.d.ts'];
/** The inputs' digest at the last build; under node_modules, so `npm ci` forgets it with the rest. */
const CLIENT_STAMP = 'node_modules/.cache/statelog/client-build.sha256';

/** SHA-256 of the files (folders walked in name order), each with its path. */
function digestOf(paths: string[]): string {
  const hash = createHash('sha256');
  const add = (path: string): void => {
    const full = join(ROOT, path);
    if (!existsSync(full)) return;
    if (statSync(full).isDirectory()) for (const name of readdirSync(full).sort()) add(`${path}/${name}`);
    else hash.update(`${path}\0`).update(readFileSync(full)).update('\0');
  };
  for (const path of paths) add(path);
  return hash.digest('hex');
}

/**
 * The client package, which the command line imports. Its build (a bundle and bundled
 * types, some 6 s) is skipped when its inputs are those of the last build: every tier's
 * setup asks for it, and one build serves them all.
 */
export function buildClient(): void {
  skipWhenBuilt(CLIENT_INPUTS, CLIENT_OUTPUTS, CLIENT_STAMP, () => run('npm', ['run', 'build', '--silent', '-w', '@statelog/client']));
}

/** Runs `build` unless its outputs are there and its inputs' digest is the one noted at its last run. */
function skipWhenBuilt(inputs: string[], outputs: string[], stampPath: string, build: () => void): void {
  const stamp = join(ROOT, stampPath);
  const digest = digestOf(inputs);
  const built = outputs.every((path) => existsSync(join(ROOT, path)));
  if (built && existsSync(stamp) && readFileSync(stamp, 'utf8') === digest) return;
  build();
  mkdirSync(dirname(stamp), { recursive: true });
  writeFileSync(stamp, digest);
}
