// Test fixtures: every test builds the app through the same factory as production, on
// a real SQLite file in its own temporary folder.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import supertest from 'supertest';
import { buildApp, type App } from '../src/app.js';
import { loadConfig } from '../src/config.js';

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
  const config = loadConfig({
    STATELOG_DB: dbPath,
    LOG_LEVEL: 'silent',
    STATELOG_COMPACT_INTERVAL_MS: '0',
    ...env,
  });
  const app = await buildApp(config);
  await prepare?.(app);
  await app.listen({ port: 0, host: '127.0.0.1' });
  return {
    app,
    dir,
    dbPath,
    http: supertest(app.server),
    async close() {
      await app.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A JSON body for supertest. */
export const json = { 'content-type': 'application/json' };
