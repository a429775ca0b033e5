// The container files, without a Docker engine: docker-compose.yml parsed and checked
// against the contract's settings, the Dockerfile's essentials checked as text, and
// both healthcheck commands run for real against a live server.
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { loadConfig } from '../src/config.js';
import { startApp, type TestApp } from './support/helpers.js';
import { portOf } from './support/http.js';

const root = new URL('..', import.meta.url);
const read = (file: string) => readFileSync(new URL(file, root), 'utf8');

/** The settings every statelog deployment documents, then this service's own tuning. */
const CONTRACT_SETTINGS = [
  'PORT', 'HOST', 'STATELOG_DB', 'STATELOG_SYNC', 'STATELOG_COMPACT_INTERVAL_MS', 'STATELOG_MIN_DIRTY_RATIO',
  'STATELOG_MIN_COMPACTION_LAG_MS', 'STATELOG_MAX_COMPACTION_LAG_MS', 'STATELOG_TOMBSTONE_RETENTION_MS',
  'STATELOG_IDEMPOTENCY_TTL_MS', 'STATELOG_MAX_VALUE_BYTES', 'STATELOG_MAX_SNAPSHOTS', 'STATELOG_TOKENS', 'LOG_LEVEL',
  'STATELOG_CONSUMER_HOLD_MAX_RECORDS', 'STATELOG_CONSUMER_HOLD_MAX_MS',
];
const OWN_SETTINGS = ['STATELOG_MAX_EVENT_LOOP_DELAY_MS', 'STATELOG_LOAD_SAMPLE_INTERVAL_MS', 'STATELOG_MAX_WATCHERS'];

interface ComposeService {
  build: { context: string; dockerfile: string };
  restart?: string;
  init?: boolean;
  ports: string[];
  volumes: string[];
  environment: Record<string, string>;
  healthcheck: { test: string[]; interval: string; retries: number };
}
interface Compose {
  services: Record<string, ComposeService>;
  volumes: Record<string, unknown>;
}

/** Compose's `${NAME:-default}` with nothing set in the environment; any other `$` is an error. */
function interpolate(value: string): string {
  const resolved = value.replace(/\$\{[A-Z_]+:-([^}]*)\}/g, (_m, fallback: string) => fallback);
  if (resolved.includes('$')) throw new Error(`unexpected interpolation in ${value}`);
  return resolved;
}

const compose = parse(read('docker-compose.yml')) as Compose;
const service = compose.services.statelog!;
const env = Object.fromEntries(Object.entries(service.environment).map(([k, v]) => [k, interpolate(String(v))]));

describe('docker-compose.yml', () => {
  it('builds the image from this folder with the Dockerfile', () => {
    expect(service.build).toEqual({ context: '.', dockerfile: 'Dockerfile' });
    expect(existsSync(new URL(service.build.dockerfile, root))).toBe(true);
  });

  it('keeps the data in a named volume mounted where STATELOG_DB points', () => {
    expect(service.volumes).toEqual(['statelog-data:/data']);
    expect(Object.keys(compose.volumes)).toContain('statelog-data');
    expect(env.STATELOG_DB!.startsWith('/data/')).toBe(true);
  });

  it('keeps the postgres, ha and cache profiles out of a plain `docker compose up`', () => {
    const others = Object.entries(compose.services).filter(([name]) => name !== 'statelog' && name !== 'statelog-cache' && !name.startsWith('ha-') && !name.startsWith('statelog-ha-'));
    expect(others.map(([name]) => name).sort()).toEqual(['postgres', 'statelog-lb', 'statelog-pg-1', 'statelog-pg-2']);
    for (const [, other] of others) expect((other as { profiles?: string[] }).profiles).toEqual(['postgres']);
    const ha = Object.entries(compose.services).filter(([name]) => name.startsWith('ha-') || name.startsWith('statelog-ha-'));
    expect(ha.length).toBeGreaterThanOrEqual(7);
    for (const [, service] of ha) expect((service as { profiles?: string[] }).profiles).toEqual(['ha']);
    expect((compose.services['statelog-cache'] as { profiles?: string[] }).profiles).toEqual(['cache']);
    expect(Object.keys(compose.volumes)).toContain('statelog-pg-data');
    // Nothing in the file fails to interpolate when STATELOG_PG_PASSWORD is unset.
    expect(read('docker-compose.yml')).not.toMatch(/\$\{[A-Z_]+:\?/);
  });

  it('runs nginx with the template where the official image fills templates in, given every variable it names', () => {
    const cache = compose.services['statelog-cache'] as unknown as { image: string; volumes: string[]; environment: Record<string, string> };
    expect(cache.image).toMatch(/^nginx:/);
    expect(cache.volumes).toEqual(['./deploy/nginx/statelog.conf.template:/etc/nginx/templates/statelog.conf.template:ro']);
    const named = new Set([...read('deploy/nginx/statelog.conf.template').matchAll(/\$\{(\w+)\}/g)].map((match) => match[1]));
    expect([...named].sort()).toEqual(Object.keys(cache.environment).sort());
    expect(cache.environment.STATELOG_UPSTREAM).toBe(`statelog:${env.PORT}`);
  });

  it('publishes the port the service listens on', () => {
    expect(service.ports).toEqual([`8080:${env.PORT}`]);
  });

  it("sets every contract setting, at the contract's default except the container's HOST and STATELOG_DB", () => {
    expect(Object.keys(env).sort()).toEqual([...CONTRACT_SETTINGS, ...OWN_SETTINGS].sort());
    const defaults = loadConfig({});
    expect(loadConfig(env)).toEqual({ ...defaults, host: '0.0.0.0', dbPath: '/data/statelog.db' });
    // No token is written into the file.
    expect(env.STATELOG_TOKENS).toBe('');
  });

  it('restarts the service and checks its health with node (no curl in slim images)', () => {
    expect(['always', 'unless-stopped']).toContain(service.restart);
    expect(service.healthcheck.test.slice(0, 3)).toEqual(['CMD', 'node', '-e']);
    expect(service.healthcheck.test[3]).toContain('/healthz');
  });
});

/** The Dockerfile's stages: the lines of each, continuation lines joined. */
function stages(dockerfile: string): string[][] {
  const lines = dockerfile
    .replace(/\\\n\s*/g, ' ')
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line && !line.startsWith('#'));
  const result: string[][] = [];
  for (const line of lines) {
    if (line.startsWith('FROM ')) result.push([]);
    result[result.length - 1]?.push(line);
  }
  return result;
}

describe('Dockerfile', () => {
  const [build, run] = stages(read('Dockerfile'));
  const indexOf = (stage: string[], pattern: RegExp) => stage.findIndex((line) => pattern.test(line));

  it('has a build stage and a run stage, both on the same supported Node LTS line, slim', () => {
    expect(stages(read('Dockerfile'))).toHaveLength(2);
    expect(build![0]).toMatch(/^FROM node:(22|24)[\w.-]*-slim AS build$/);
    expect(run![0]).toBe(build![0]!.replace(/ AS build$/, ''));
  });

  it('builds the native module, then the code, then drops dev dependencies, in the build stage', () => {
    const tools = indexOf(build!, /apt-get install .*python3.*make.*g\+\+/);
    const install = indexOf(build!, /^RUN npm ci\b/);
    // The package's `prepare` compiles src/, not copied yet when the dependencies install.
    expect(build![install]).toContain('--ignore-scripts');
    const compile = indexOf(build!, /npm run build/);
    const prune = indexOf(build!, /npm prune --omit=dev/);
    expect(tools).toBeGreaterThan(0);
    expect(install).toBeGreaterThan(tools);
    expect(compile).toBeGreaterThan(install);
    expect(prune).toBeGreaterThanOrEqual(compile);
    expect(indexOf(run!, /apt-get|npm ci|npm install/)).toBe(-1);
  });

  it('runs the compiled server, with its migrations, as a non-root user, data in /data', () => {
    expect(run).toContain('COPY --from=build /app/node_modules ./node_modules');
    expect(run).toContain('COPY --from=build /app/dist ./dist');
    expect(run).toContain('COPY migrations ./migrations');
    expect(existsSync(new URL('migrations/sqlite', root))).toBe(true);
    expect(run).toContain('VOLUME ["/data"]');
    const user = run!.find((line) => line.startsWith('USER '));
    expect(user).toBeDefined();
    expect(user).not.toMatch(/^USER (root|0)(:|$)/);
    expect(indexOf(run!, /^USER /)).toBeGreaterThan(indexOf(run!, /chown node:node \/data/));
    const envLine = run!.find((line) => line.startsWith('ENV '))!;
    expect(envLine).toContain('HOST=0.0.0.0');
    expect(envLine).toContain('STATELOG_DB=/data/statelog.db');
    expect(run!.at(-1)).toBe('CMD ["node", "dist/server.js"]');
    // tsc puts src/server.ts at dist/server.js.
    const tsconfig = JSON.parse(read('tsconfig.json')) as { compilerOptions: { outDir: string; rootDir: string } };
    expect(tsconfig.compilerOptions).toMatchObject({ outDir: 'dist', rootDir: 'src' });
  });

  it('keeps the build context small', () => {
    const ignored = read('.dockerignore').split('\n');
    for (const entry of ['.git', 'node_modules', 'dist', 'data', '*.db']) expect(ignored).toContain(entry);
  });
});

describe('the healthcheck commands', () => {
  const dockerfileCheck = (() => {
    const line = stages(read('Dockerfile'))[1]!.find((l) => l.startsWith('HEALTHCHECK '))!;
    return JSON.parse(/ CMD (\[.*\])$/.exec(line)![1]!) as string[];
  })();
  const composeCheck = service.healthcheck.test.slice(1);
  let t: TestApp;
  beforeAll(async () => {
    t = await startApp();
  });
  afterAll(() => t.close());

  const run = (command: string[], port: number) =>
    promisify(execFile)(command[0] === 'node' ? process.execPath : command[0]!, command.slice(1), {
      env: { PATH: process.env.PATH, PORT: String(port) },
      timeout: 10_000,
    }).then(
      () => 0,
      (err: { code?: number }) => err.code ?? -1,
    );

  it.each([
    ['Dockerfile', () => dockerfileCheck],
    ['docker-compose.yml', () => composeCheck],
  ])('of the %s pass on a live server and fail when nothing listens', async (_file, command) => {
    expect(command()[0]).toBe('node');
    expect(await run(command(), portOf(t.app.server))).toBe(0);
    // Nothing listens on port 1.
    expect(await run(command(), 1)).toBe(1);
  });
});
