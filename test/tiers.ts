// The test tiers, declared here and nowhere else: vitest.config.ts makes one vitest project
// of each, scripts/test-tiers.ts runs them (`npm test` the fast one, `npm run test:<name>`
// one other, `npm run test:all` every one) and test/tiers.test.ts checks that every test
// file lands in one tier and every tier has its npm script. A test file belongs to the
// first tier whose globs match it, and to the fast tier when none does.

/** Something a tier needs that a newcomer's machine may lack. */
export interface Need {
  /** What it is, in the skip line: "needs Chromium". */
  name: string;
  /** How to get it. */
  hint: string;
  /** Whether it is there (imported lazily: vitest.config.ts never runs it). */
  present: () => Promise<boolean>;
}

export interface Tier {
  /** The vitest project and the npm script (`npm run test:<name>`). */
  name: string;
  /** What it proves and needs, in a line (printed by `npm run test:all -- --list`). */
  what: string;
  /** Its files; the fast tier's are every file no other tier claims. */
  include: string[];
  store: 'sqlite' | 'postgres';
  /** Whether the pg tier runs its files again on PostgreSQL (less SQLITE_ONLY and STORE_FREE). */
  onPostgresToo: boolean;
  /** vitest globalSetup files, run once before its files. */
  globalSetup: string[];
  needs: Need[];
  /**
   * Runs even under CI=true when what it needs is absent, with its one line: what .ci/run
   * knowingly does not provide yet.
   */
  optionalInCi?: boolean;
  /** Its files one at a time: each starts a whole cluster, and two at once starve each other's timers. */
  serial?: boolean;
  env?: Record<string, string>;
}

const command = (name: string, args: string[]) => async () => {
  const { spawnSync } = await import('node:child_process');
  return spawnSync(name, args, { stdio: 'ignore' }).status === 0;
};

const CHROMIUM: Need = {
  name: 'Chromium',
  hint: 'apt-get install chromium, npx playwright-core install chromium, or set STATELOG_TEST_CHROMIUM',
  present: async () => (await import('./ui/find-chromium.js')).findChromium() !== null,
};
const NGINX: Need = {
  name: 'nginx',
  hint: 'apt-get install nginx',
  present: async () => (await import('../harness/nginx.js')).hasNginx,
};
const PROMTOOL: Need = {
  name: 'promtool',
  hint: 'apt-get install prometheus, or set STATELOG_TEST_PROMTOOL',
  present: command(process.env.STATELOG_TEST_PROMTOOL || 'promtool', ['--version']),
};
const HA: Need = {
  name: 'Patroni, etcd and HAProxy',
  hint: 'apt-get install patroni etcd-server etcd-client haproxy',
  present: async () => (await command('patroni', ['--version'])()) && (await command('etcd', ['--version'])()) && (await command('haproxy', ['-v'])()),
};

/** Tests that only make sense on SQLite, each with its reason: the pg tier leaves them out. */
export const SQLITE_ONLY = [
  'test/process.test.ts', // opens the .db file directly and runs the SQLite migrations
  'test/sqlite-*.test.ts', // the SQLite store's own readers and checkpointer
  'test/compaction-disk.test.ts', // measures the SQLite file's size on disk
  // The dashboard's static files: nothing in them depends on the store.
  'test/ui/**',
];

/**
 * Tests of no store at all, run once on SQLite: the pg tier leaves them out. The tiers
 * whose files touch no store (browser, nginx, docker, bench) are left out of it whole.
 */
export const STORE_FREE = [
  'test/config.test.ts',
  'test/token-file.test.ts',
  'test/tail-pages.test.ts',
  'test/remembered-answers.test.ts', // the write planner alone
  'test/durable-head.test.ts', // the barriers' bookkeeping, with barriers the test answers
  'test/lint-boundaries.test.ts', // reads eslint.config.js, no store
  'test/tiers.test.ts', // reads this file and package.json
  'test/client-abort.test.ts', // how a client's reset is logged: the store plays no part
  'test/client-timeouts.test.ts', // the client against bare sockets that stop answering
  // The command-line client speaks HTTP only (its backup and restore are SQLite's): the
  // API it calls is tested on both stores elsewhere, and each of its steps starts a process.
  'test/cli.test.ts',
  // The same command under faults (a killed server, resets, a wrong token, a pipe closed
  // early): what it meets is HTTP, whichever store answers.
  'test/cli-faults.test.ts',
  // HTTPS and CORS are the transport's: nothing in them depends on the store.
  'test/tls.test.ts',
  'test/client-certificates.test.ts',
  'test/cors.test.ts',
  // The README's commands against a server process: HTTP only, like the CLI.
  'test/readme.test.ts',
];

/**
 * Files that spend their time waiting on a clock, started before the others of their tier so
 * that the others run beside them. Without vitest's cache of durations (a clean clone, CI) it
 * starts small files last, and these would then run alone at the end.
 */
export const WAITING = [
  'test/change-stream-progress.test.ts', // the 15-second progress interval, on a quiet stream
];

const BUILD = 'test/support/build-global-setup.ts'; // the server and the CLI compiled once
const UI = 'test/support/ui-global-setup.ts'; // the dashboard built once
const PG = 'test/support/pg-global-setup.ts'; // a PostgreSQL to use, embedded when none answers

/** Every tier but the fast one, in the order `npm run test:all` and .ci/run run them. */
export const SLOW_TIERS: Tier[] = [
  {
    name: 'crash',
    what: 'server processes started, killed, restarted, reloaded and stopped mid-work, a failing disk and the file lock under a real process, and the clients that ride through it',
    include: [
      'test/crash*.test.ts',
      'test/compaction-crash.test.ts',
      'test/ttl-digest-crash.test.ts',
      'test/watch-faults.test.ts',
      'test/server-process.test.ts',
      'test/sighup.test.ts',
      'test/process.test.ts',
      'test/sqlite-process-lock.test.ts',
      'test/sqlite-fsync-failure.test.ts',
      'test/sqlite-disk-full.test.ts',
    ],
    store: 'sqlite',
    onPostgresToo: true,
    globalSetup: [BUILD],
    needs: [],
  },
  {
    name: 'commands',
    what: "what a user types, each step a process: the command-line client (under faults too, and its backups restored), the README's commands, the examples",
    include: [
      'test/cli.test.ts',
      'test/cli-faults.test.ts',
      'test/backup-restore.test.ts',
      'test/client-certificates.test.ts', // its entries made by `statelog token new`, and the command with a certificate
      'test/readme.test.ts',
      'test/examples.test.ts',
    ],
    store: 'sqlite',
    onPostgresToo: true,
    globalSetup: [BUILD],
    needs: [],
  },
  {
    name: 'property',
    what: 'long runs of generated inputs: the compaction rules, the change feed and the scopes as properties, and the API fuzzed',
    include: ['test/*-property.test.ts', 'test/*-properties.test.ts', 'test/fuzz.test.ts'],
    store: 'sqlite',
    onPostgresToo: true,
    globalSetup: [BUILD],
    needs: [],
  },
  {
    name: 'large',
    what: 'large data: tens of megabytes through snapshots past the socket buffers, a long log compacted on disk and while it is read and written',
    include: ['test/snapshot-slow-readers.test.ts', 'test/compaction-disk.test.ts', 'test/compaction-concurrency.test.ts'],
    store: 'sqlite',
    onPostgresToo: true,
    globalSetup: [BUILD],
    needs: [],
  },
  {
    name: 'browser',
    what: 'the dashboard in headless Chromium (nothing in it depends on the store: SQLite only)',
    include: ['test/ui/cors.test.ts', 'test/ui/dashboard.test.ts', 'test/ui/event-source.test.ts', 'test/ui/no-browser.test.ts'],
    store: 'sqlite',
    onPostgresToo: false,
    globalSetup: [BUILD, UI],
    needs: [CHROMIUM],
  },
  {
    name: 'nginx',
    what: 'statelog behind nginx (deploy/nginx): its cache, and a restore into a new epoch (SQLite only)',
    include: ['test/nginx-cache.test.ts'],
    store: 'sqlite',
    onPostgresToo: false,
    globalSetup: [BUILD],
    needs: [NGINX],
  },
  {
    name: 'promtool',
    what: "/metrics checked by Prometheus's own linter",
    include: ['test/metrics-promtool.test.ts'],
    store: 'sqlite',
    onPostgresToo: true,
    globalSetup: [BUILD],
    needs: [PROMTOOL],
  },
  {
    name: 'bench',
    what: "the benchmarks' smoke runs: every figure briefly on tiny data (does the harness work?)",
    include: ['test/bench-smoke.test.ts'],
    store: 'sqlite',
    onPostgresToo: false,
    globalSetup: [BUILD],
    needs: [],
  },
  {
    name: 'dockerfile',
    what: "the Dockerfile's steps run for real, without a Docker engine (a full npm ci, the native module compiled)",
    include: ['test/dockerfile-build.test.ts'],
    store: 'sqlite',
    onPostgresToo: false,
    globalSetup: [BUILD],
    needs: [],
  },
  {
    name: 'pg',
    what: "test/postgres, and the files of the tiers that use a store again on PostgreSQL (an embedded server when none answers at 127.0.0.1:5432)",
    include: ['test/postgres/**/*.test.ts'],
    store: 'postgres',
    onPostgresToo: true,
    globalSetup: [BUILD, PG],
    needs: [],
  },
  {
    name: 'ha',
    what: 'high availability: statelog nodes on PostgreSQL under Patroni, etcd and HAProxy, across real failovers',
    include: ['test/ha/**/*.test.ts'],
    store: 'postgres',
    onPostgresToo: false,
    globalSetup: [BUILD],
    needs: [HA],
    serial: true,
  },
];

export const FAST_TIER: Tier = {
  name: 'fast',
  what: 'the modules and the HTTP contract on an embedded SQLite file and real sockets (npm test)',
  include: ['test/**/*.test.ts'],
  store: 'sqlite',
  onPostgresToo: true,
  globalSetup: [BUILD, UI],
  needs: [],
};

export const TIERS: Tier[] = [FAST_TIER, ...SLOW_TIERS];

/** A tier's files as vitest's include and exclude: the fast tier's are those no other tier claims. */
export function tierFiles(tier: Tier): { include: string[]; exclude: string[] } {
  const claimed = SLOW_TIERS.flatMap((other) => other.include);
  if (tier === FAST_TIER) return { include: tier.include, exclude: claimed };
  if (tier.name !== 'pg') return { include: tier.include, exclude: [] };
  // Every file but those of the tiers that run on SQLite alone or on their own PostgreSQL.
  const elsewhere = SLOW_TIERS.filter((other) => other !== tier && !other.onPostgresToo).flatMap((other) => other.include);
  return { include: ['test/**/*.test.ts'], exclude: [...SQLITE_ONLY, ...STORE_FREE, ...elsewhere] };
}
