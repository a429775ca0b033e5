// Test fixtures: every test builds the app through the same factory as production, on a
// fresh database of the store under test: a real SQLite file in its own temporary
// folder, or (STATELOG_TEST_STORE=postgres, the pg tier) a throw-away
// PostgreSQL database.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import supertest from 'supertest';
import { afterAll, beforeAll } from 'vitest';
import { buildApp, type App } from '../../src/app.js';
import { loadConfig } from '../../src/config.js';
import { testStore, type TestStore } from './store-access.js';

export { TEST_STORE, testStore, type TestStore } from './store-access.js';

export interface TestApp {
  app: App;
  dir: string;
  /** The SQLite file (on SQLite only). */
  dbPath: string;
  /** The app's database, with the direct access that tests need (store-access.ts). */
  database: TestStore;
  http: ReturnType<typeof supertest>;
  close(): Promise<void>;
}

export function tempDir(): string {
  return mkdtempSync(join(tmpdir(), 'statelog-test-'));
}

/**
 * One database of the store under test for a whole test file, made before its first test
 * and dropped after its last (a test empties it with reset()). Call at the file's top level.
 */
export function fileDatabase(): () => TestStore {
  const dir = tempDir();
  let database: TestStore | undefined;
  beforeAll(async () => {
    database = await testStore(dir);
  });
  afterAll(async () => {
    await database?.drop();
    rmSync(dir, { recursive: true, force: true });
  });
  return () => database!;
}

export interface StartOptions {
  /** The folder of the SQLite file and of the test's own files (a new one by default). */
  dir?: string;
  /** Fills the new database before the app opens it. */
  seed?: (database: TestStore) => Promise<unknown>;
  /** Runs before listening (to add a test's own routes or hooks). */
  prepare?: (app: App) => void | Promise<void>;
}

/** The app on a fresh database; `env` overrides settings as the environment would. */
export async function startApp(env: Record<string, string> = {}, options: StartOptions = {}): Promise<TestApp> {
  const dir = options.dir ?? tempDir();
  const dbPath = join(dir, 'statelog.db');
  const database = await testStore(dir);
  let app: App;
  try {
    await options.seed?.(database);
    const config = loadConfig({
      ...database.env,
      LOG_LEVEL: 'silent',
      STATELOG_COMPACT_INTERVAL_MS: '0',
      // Load shedding has tests of its own (overload.test.ts); elsewhere a busy test
      // machine must not turn answers into 503 overloaded.
      STATELOG_MAX_EVENT_LOOP_DELAY_MS: '0',
      ...env,
    });
    app = await buildApp(config, { openStore: (config, hooks) => database.openAppStore(config, hooks) });
    await options.prepare?.(app);
  } catch (err) {
    await database.drop();
    throw err;
  }
  await app.listen({ port: 0, host: '127.0.0.1' });
  return {
    app,
    dir,
    dbPath,
    database,
    http: supertest(app.server),
    async close() {
      await app.close();
      await database.drop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A JSON body for supertest. */
export const json = { 'content-type': 'application/json' };
