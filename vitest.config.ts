import { defaultServerConditions } from 'vite';
import { defineConfig } from 'vitest/config';

// The suite runs twice, once per store: the same test files against SQLite and against
// PostgreSQL (test/support/store-access.ts reads STATELOG_TEST_STORE). Tests that need the database
// itself (counts from the tables, the horizon, failures, large logs) go through
// test/support/store-access.ts, which does it for either store.
/** Tests that only make sense on one store, each with its reason. */
const SQLITE_ONLY = [
  'test/process.test.ts', // opens the .db file directly and runs the SQLite migrations
  'test/sqlite-*.test.ts', // the SQLite store's own readers and checkpointer
  'test/compaction-disk.test.ts', // measures the SQLite file's size on disk
  // nginx in front restores a copy of the SQLite file into a new epoch; the cache is the
  // same in front of either store.
  'test/nginx-cache.test.ts',
  // The dashboard (its static files, and the page in headless Chromium): nothing in it
  // depends on the store, and running a browser twice is time spent for nothing.
  'test/ui/**',
];
const POSTGRES_ONLY = ['test/postgres/**'];
/** Tests of no store at all: run once, in the sqlite project. */
const STORE_FREE = [
  'test/config.test.ts',
  'test/token-file.test.ts',
  'test/bench-smoke.test.ts',
  'test/tail-pages.test.ts',
  'test/remembered-answers.test.ts', // the write planner alone
  'test/lint-boundaries.test.ts', // reads eslint.config.js, no store
  'test/client-abort.test.ts', // how a client's reset is logged: the store plays no part
  'test/client-timeouts.test.ts', // the client against bare sockets that stop answering
  // The command-line client speaks HTTP only (its backup and restore are SQLite's): the
  // API it calls is tested on both stores elsewhere, and each of its steps starts a
  // process, half a minute of the suite a store.
  'test/cli.test.ts',
  // The same command under faults (a killed server, resets, a wrong token, a pipe closed
  // early): what it meets is HTTP, whichever store answers.
  'test/cli-faults.test.ts',
  // HTTPS and CORS are the transport's: nothing in them depends on the store.
  'test/tls.test.ts',
  'test/client-certificates.test.ts',
  'test/cors.test.ts',
  'test/dockerfile-build.test.ts',
  // The README's commands against a server process: HTTP only, like the CLI.
  'test/readme.test.ts',
];

/**
 * The Dockerfile's steps run for real (a full `npm ci`, the native module compiled): minutes
 * long, so only when asked (`npm run test:dockerfile`, which .ci/run runs).
 */
const SLOW = process.env.STATELOG_TEST_DOCKERFILE === '1' ? [] : ['test/dockerfile-build.test.ts'];

export default defineConfig({
  // The workspace packages (packages/*) are tested from their TypeScript, not their build.
  ssr: { resolve: { conditions: ['@statelog/source', ...defaultServerConditions] } },
  test: {
    testTimeout: 30_000,
    hookTimeout: 30_000,
    pool: 'forks',
    // Each worker keeps its modules from one file to the next: re-importing fastify, ajv,
    // pg and the rest for every file cost about a fifth of the suite. The files share no
    // state through them: every app, store and registry is made by the test that uses it.
    isolate: false,
    // Both cores: most files spend their time waiting on child servers and PostgreSQL.
    maxWorkers: 2,
    projects: [
      {
        extends: true,
        test: {
          name: 'sqlite',
          include: ['test/**/*.test.ts'],
          exclude: [...POSTGRES_ONLY, ...SLOW],
          env: { STATELOG_TEST_STORE: 'sqlite' },
          // The server and the CLI compiled once for the child processes (both projects);
          // the dashboard, built once for test/ui.
          globalSetup: ['test/support/build-global-setup.ts', 'test/support/ui-global-setup.ts'],
        },
      },
      {
        extends: true,
        test: {
          name: 'postgres',
          include: ['test/**/*.test.ts'],
          exclude: [...SQLITE_ONLY, ...STORE_FREE],
          env: { STATELOG_TEST_STORE: 'postgres' },
          globalSetup: ['test/support/build-global-setup.ts', 'test/support/pg-global-setup.ts'],
        },
      },
    ],
  },
});
