// Test fixtures: every test builds the app through the same factory as production, on a
// fresh database of the store under test: a real SQLite file in its own temporary
// folder, or (STATELOG_TEST_STORE=postgres, the postgres vitest project) a throw-away
// PostgreSQL database.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import supertest from 'supertest';
import { buildApp, type App } from '../src/app.js';
import { loadConfig } from '../src/config.js';
import { createTestDatabase } from './support/pg-database.js';

/** The store the HTTP tests run against. */
export const TEST_STORE: 'sqlite' | 'postgres' = process.env.STATELOG_TEST_STORE === 'postgres' ? 'postgres' : 'sqlite';

export interface TestApp {
  app: App;
  dir: string;
  dbPath: string;
  http: ReturnType<typeof supertest>;
  close(): Promise<void>;
}

export function tempDir(): string {
  return mkdtempSync(join(tmpdir(), 'statelog-test-'));
}

export interface TestStore {
  /** The settings that put a server (in this process or a child) on this database. */
  env: Record<string, string>;
  drop(): Promise<void>;
}

/** A fresh database of the store under test: a file in `dir`, or a new PostgreSQL database. */
export async function testStore(dir: string, file = 'statelog.db'): Promise<TestStore> {
  if (TEST_STORE === 'sqlite') return { env: { STATELOG_DB: join(dir, file) }, drop: async () => {} };
  const db = await createTestDatabase();
  return {
    // A small pool: many test apps share the server's connection limit.
    env: { STATELOG_STORE: 'postgres', DATABASE_URL: db.url, STATELOG_PG_POOL_SIZE: '4' },
    drop: db.drop,
  };
}

/**
 * The app on a fresh database; `env` overrides settings as the environment would.
 * `prepare` runs before listening (to add a test's own routes or hooks).
 */
export async function startApp(
  env: Record<string, string> = {},
  dir = tempDir(),
  prepare?: (app: App) => void | Promise<void>,
): Promise<TestApp> {
  const dbPath = join(dir, 'statelog.db');
  const store = await testStore(dir);
  const config = loadConfig({
    ...store.env,
    LOG_LEVEL: 'silent',
    STATELOG_COMPACT_INTERVAL_MS: '0',
    ...env,
  });
  let app: App;
  try {
    app = await buildApp(config);
    await prepare?.(app);
  } catch (err) {
    await store.drop();
    throw err;
  }
  await app.listen({ port: 0, host: '127.0.0.1' });
  return {
    app,
    dir,
    dbPath,
    http: supertest(app.server),
    async close() {
      await app.close();
      await store.drop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A JSON body for supertest. */
export const json = { 'content-type': 'application/json' };
