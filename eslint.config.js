import js from '@eslint/js';
import globals from 'globals';
import tseslint from 'typescript-eslint';

/** An import boundary: files matching `files` may not import what `regex` matches. */
function boundary(files, regex, message) {
  return { files, rules: { 'no-restricted-imports': ['error', { patterns: [{ regex, message }] }] } };
}

/** The client speaks HTTP only (for every file of packages/client; narrower entries add to it). */
const CLIENT_BANS =
  '^\\.\\./(?!\\.\\./\\.\\./src/contract/(?!render\\.js$))|^(fastify|@fastify/.+|better-sqlite3|pg|pino|prom-client|statelog)(/|$)';
const CLIENT_WHY = 'the client speaks HTTP only: of the server it imports the contract (src/contract) alone, and none of its packages';

export default tseslint.config(
  { ignores: ['dist/', '**/dist/', '.variant-*/', '.base-*/', 'node_modules/', 'coverage/', 'bench/results/', 'test-artifacts/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { globals: { ...globals.node } },
    rules: {
      'no-control-regex': 'off',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_' }],
    },
  },
  // The dashboard's code runs in the browser.
  { files: ['ui/**/*.ts'], languageOptions: { globals: { ...globals.browser } } },

  // The parts of the system, kept apart (test/lint-boundaries.test.ts shows a breach fails).
  // Later entries for the same files win, so each part states all of its bans in one entry.
  boundary(['src/**/*.ts'], '(^|/)(test|bench|harness)/', 'the service never imports tests, benchmarks or their harness'),
  boundary(['packages/client/**/*.ts'], CLIENT_BANS, CLIENT_WHY),
  // Inside the client, the page and snapshot primitives (pages.ts) and what they use sit
  // below StatelogClient and watch(): nothing down there imports the layers above it.
  boundary(
    ['packages/client/src/{pages,errors,retry,sse,checkpoint}.ts'],
    `${CLIENT_BANS}|^\\./(client|watch|consumers|consumer-watch|state-mirror|index)\\.js$`,
    `${CLIENT_WHY}; the page and snapshot primitives sit below the client and watch(), and import neither`,
  ),
  boundary(
    ['packages/client/src/consumers.ts'],
    `${CLIENT_BANS}|^\\./(client|watch|consumer-watch|state-mirror|index)\\.js$`,
    `${CLIENT_WHY}; the consumer calls sit on the pages' requests, below the client and the consumer's watch`,
  ),
  boundary(
    ['packages/client/src/watch.ts'],
    `${CLIENT_BANS}|^\\./(client|consumers|consumer-watch|state-mirror|index)\\.js$`,
    `${CLIENT_WHY}; watch() follows the pages of pages.ts, and never imports the client built on it`,
  ),
  boundary(
    ['packages/client/src/consumer-watch.ts'],
    `${CLIENT_BANS}|^\\./(client|state-mirror|index)\\.js$`,
    `${CLIENT_WHY}; a consumer's watch is watch() and the consumer calls, below the client that offers it`,
  ),
  boundary(
    ['src/contract/**/*.ts'],
    '^\\.\\./|(^|/)(test|bench)/',
    'the contract describes the API and holds the data model (model.ts): it imports nothing else of the server',
  ),
  boundary(
    ['src/store/**/*.ts'],
    '(^|/)(http|routes|writes|feed|snapshot|compaction)/|(^|/)(app|services|metrics|server)\\.js$|(^|/)(test|bench|harness)/',
    'a store reads and writes the log: it never imports HTTP, routes, the feed, snapshots or the process',
  ),
  boundary(
    ['src/http/**/*.ts'],
    '(^|/)(routes|sqlite|postgres)/|(^|/)(app|services|server|reload)\\.js$|(^|/)(test|bench|harness)/',
    'HTTP plumbing serves the routes: it never imports them, what builds the app (app, services) or a store driver',
  ),
  boundary(
    ['src/writes/**/*.ts'],
    '(^|/)(http|routes|feed|snapshot|compaction)/|(^|/)(app|services|server)\\.js$|^(fastify|@fastify/.+)(/|$)|(^|/)(test|bench|harness)/',
    'the write path queues and applies writes: it never imports HTTP, routes, the feed, snapshots or the process',
  ),
  boundary(
    ['src/feed/**/*.ts'],
    '(^|/)(http|routes|writes|compaction|sqlite|postgres)/|(^|/)(app|services|server|metrics|reload|config)\\.js$|^(fastify|@fastify/.+|better-sqlite3|pg)(/|$)|(^|/)(test|bench|harness)/',
    'the feed reads the log for its readers and yields events: it imports the contract, the store interface and snapshots, never HTTP, routes, the write path, a store driver or the process',
  ),
  boundary(
    ['src/snapshot/**/*.ts'],
    '(^|/)(feed|http|routes|writes|compaction|sqlite|postgres)/|(^|/)(app|services|server|metrics|reload|config)\\.js$|^(fastify|@fastify/.+|better-sqlite3|pg)(/|$)|(^|/)(test|bench|harness)/',
    'snapshots copy the store\'s state to spools: they import the contract and the store interface, never the feed, HTTP, routes, the write path, a store driver or the process',
  ),
  boundary(
    ['src/consumers/**/*.ts'],
    '(^|/)(http|routes|writes|feed|snapshot|compaction|sqlite|postgres)/|(^|/)(app|services|server|metrics)\\.js$|^(fastify|@fastify/.+|better-sqlite3|pg)(/|$)|(^|/)(test|bench|harness)/',
    'consumers\' holds work through the store interface and its rules: no HTTP, routes, write path, store driver or the process',
  ),
  boundary(['bench/**/*.ts'], '(^|/)test/', 'benchmarks share harness/ with the tests, and import nothing of test/'),
  boundary(['harness/**/*.ts'], '(^|/)(test|bench)/', 'the harness serves tests and benchmarks: it imports neither'),
  boundary(['ui/**/*.ts'], '^\\.\\./(?!src/contract/)', 'the dashboard imports only the contract (src/contract)'),
);
