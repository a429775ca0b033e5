// The Dockerfile's steps, run without a Docker engine: the build stage's COPY and RUN
// instructions in order, in a temporary folder that holds only what was copied so far
// (so a step that needs a file copied later fails here as it would in `docker build`),
// then the run stage assembled from the build's output and its CMD started and asked
// for /healthz. Steps that set up the image's system (apt packages, the data folder's
// owner) are skipped by name, each with its reason; every other RUN runs as written.
// Minutes long (a full `npm ci` and the native module compiled from source): outside
// `npm test`: the dockerfile tier (test/tiers.ts), `npm run test:dockerfile`, which .ci/run runs.
import { spawn } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { parseCopy, parseDockerfile, type Stage } from './support/dockerfile.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
/** Another Dockerfile may be named, to see this test fail on a broken one (the build context stays this folder). */
const DOCKERFILE = process.env.STATELOG_TEST_DOCKERFILE_PATH || join(ROOT, 'Dockerfile');
const stages = parseDockerfile(readFileSync(DOCKERFILE, 'utf8'));

/** RUN steps not run here: they set up the image's system, which this machine provides or the test replaces. */
const SYSTEM_STEPS: { pattern: RegExp; reason: string }[] = [
  { pattern: /^apt-get update /, reason: "the image's system packages (python3, make, g++ are this machine's)" },
  { pattern: /^mkdir -p \/data && chown node:node \/data$/, reason: 'the data folder and its owner (the test gives STATELOG_DB a temporary folder)' },
];
/** Instructions about the container, not its files (test/container.test.ts checks them). */
const CONTAINER_ONLY = new Set(['USER', 'VOLUME', 'EXPOSE', 'HEALTHCHECK', 'STOPSIGNAL', 'LABEL', 'ARG']);
/** Paths .dockerignore keeps out of the build context. */
const IGNORED = readFileSync(join(ROOT, '.dockerignore'), 'utf8')
  .split('\n')
  .map((line) => line.trim())
  .filter((line) => line && !line.startsWith('#'));

const temp = mkdtempSync(join(tmpdir(), 'statelog-dockerfile-'));
afterAll(() => rmSync(temp, { recursive: true, force: true }), 120_000);

interface Filesystem {
  root: string;
  workdir: string;
  env: Record<string, string>;
  skipped: string[];
}

/** A path in the stage's file system, as a path in the temporary folder. */
const inside = (fs: Filesystem, path: string) => (path.startsWith('/') ? join(fs.root, path) : join(fs.workdir, path));

/** A clean environment: no npm_* variables of the `npm test` that runs this file. */
function baseEnv(): Record<string, string> {
  return { PATH: process.env.PATH!, HOME: process.env.HOME!, npm_config_update_notifier: 'false' };
}

function run(command: string, fs: Filesystem): Promise<void> {
  return new Promise((resolve, reject) => {
    const proc = spawn('sh', ['-c', command], { cwd: fs.workdir, env: { ...baseEnv(), ...fs.env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    proc.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    proc.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    proc.once('error', reject);
    proc.once('exit', (code) =>
      code === 0 ? resolve() : reject(new Error(`RUN ${command} exited with ${code}:\n${output.slice(-3000)}`)),
    );
  });
}

function copy(args: string, fs: Filesystem, stagesByName: Map<string, Filesystem>): void {
  const { from, sources, dest } = parseCopy(args);
  const origin = from === null ? null : stagesByName.get(from);
  if (from !== null && !origin) throw new Error(`COPY --from=${from}: no such stage`);
  const target = inside(fs, dest);
  const intoFolder = dest.endsWith('/') || sources.length > 1;
  for (const source of sources) {
    let path: string;
    if (origin) path = inside(origin, source);
    else {
      if (IGNORED.includes(source.split('/')[0]!)) throw new Error(`COPY ${source}: excluded by .dockerignore`);
      path = join(ROOT, source);
    }
    if (!existsSync(path)) throw new Error(`COPY ${source}: not there`);
    cpSync(path, intoFolder ? join(target, basename(source)) : target, { recursive: true });
  }
}

function setEnv(args: string, fs: Filesystem): void {
  for (const pair of args.split(/\s+/)) {
    const [name, ...value] = pair.split('=');
    fs.env[name!] = value.join('=');
  }
}

/** Runs a stage's steps up to its CMD; returns its file system and the CMD, if any. */
async function runStage(stage: Stage, stagesByName: Map<string, Filesystem>): Promise<{ fs: Filesystem; cmd: string[] | null }> {
  const root = join(temp, stage.name ?? `stage-${stagesByName.size}`);
  mkdirSync(root, { recursive: true });
  const fs: Filesystem = { root, workdir: root, env: {}, skipped: [] };
  let cmd: string[] | null = null;
  for (const { op, args } of stage.steps) {
    if (op === 'WORKDIR') {
      fs.workdir = inside(fs, args);
      mkdirSync(fs.workdir, { recursive: true });
    } else if (op === 'ENV') setEnv(args, fs);
    else if (op === 'COPY') copy(args, fs, stagesByName);
    else if (op === 'RUN') {
      const system = SYSTEM_STEPS.find((step) => step.pattern.test(args));
      if (system) fs.skipped.push(`RUN ${args.slice(0, 40)}…: ${system.reason}`);
      else {
        const started = Date.now();
        await run(args, fs);
        // Minutes-long steps: say which took how long.
        console.log(`${stage.name ?? 'run stage'}: RUN ${args} (${Math.round((Date.now() - started) / 1000)} s)`);
      }
    } else if (op === 'CMD') cmd = JSON.parse(args) as string[];
    else if (!CONTAINER_ONLY.has(op)) throw new Error(`${op}: an instruction this test does not know how to run`);
  }
  stagesByName.set(stage.name ?? String(stagesByName.size), fs);
  return { fs, cmd };
}

describe('the Dockerfile, step by step', () => {
  const built = new Map<string, Filesystem>();

  it('is a build stage and a run stage on a supported Node LTS line, slim', () => {
    expect(stages).toHaveLength(2);
    const lines = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { engines: { node: string } }).engines.node;
    for (const stage of stages) {
      const [, major] = /^node:(\d+)[\w.-]*-slim$/.exec(stage.image) ?? [];
      expect(['22', '24']).toContain(major);
      expect(lines).toContain(`^${major}.`);
    }
  });

  it('builds: each COPY finds its files, each RUN succeeds with only the files copied before it', { timeout: 1_800_000 }, async () => {
    const { fs } = await runStage(stages[0]!, built);
    expect(fs.skipped).toHaveLength(1);
    expect(existsSync(join(fs.workdir, 'dist/server.js'))).toBe(true);
    expect(existsSync(join(fs.workdir, 'dist/ui/index.html'))).toBe(true);
    // Dev dependencies are gone, the native module is there.
    expect(existsSync(join(fs.workdir, 'node_modules/vitest'))).toBe(false);
    expect(existsSync(join(fs.workdir, 'node_modules/better-sqlite3/build/Release/better_sqlite3.node'))).toBe(true);
  });

  it('runs: the run stage, assembled from the build, starts with its CMD and answers', { timeout: 60_000 }, async () => {
    expect(built.size).toBe(1);
    const { fs, cmd } = await runStage(stages[1]!, built);
    expect(cmd).toEqual(['node', 'dist/server.js']);
    const data = join(temp, 'data');
    mkdirSync(data);
    const server = spawn(process.execPath, cmd!.slice(1), {
      cwd: fs.workdir,
      env: { ...baseEnv(), ...fs.env, HOST: '127.0.0.1', PORT: '0', STATELOG_DB: join(data, 'statelog.db') },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    try {
      let out = '';
      server.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
      server.stderr.on('data', (chunk: Buffer) => (out += chunk.toString()));
      const port = await new Promise<number>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no listening line:\n${out}`)), 20_000);
        const check = () => {
          const match = /Server listening at http:\/\/127\.0\.0\.1:(\d+)/.exec(out);
          if (match) {
            clearTimeout(timer);
            resolve(Number(match[1]));
          }
        };
        server.stdout.on('data', check);
        server.once('exit', () => reject(new Error(`the server exited:\n${out}`)));
      });
      const base = `http://127.0.0.1:${port}`;
      expect((await fetch(`${base}/healthz`)).status).toBe(200);
      const put = await fetch(`${base}/v1/keys/image-check`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: '{"value":1}' });
      expect(put.status).toBe(200);
      expect(((await (await fetch(`${base}/v1/keys/image-check`)).json()) as { value: unknown }).value).toBe(1);
      const exited = new Promise<number | null>((resolve) => server.once('exit', (code) => resolve(code)));
      server.kill('SIGTERM');
      expect(await exited).toBe(0);
    } finally {
      server.kill('SIGKILL');
    }
  });
});
