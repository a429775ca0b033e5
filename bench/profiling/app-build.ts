// What building an app, listening and closing it costs, as every test that starts one pays
// it: the median over apps built one after the other in one process by buildApp, each on a
// new database (a SQLite file, or a PostgreSQL database cloned from the migrated template).
//   npx tsx --conditions=@statelog/source bench/profiling/app-build.ts [apps] [--postgres]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { closeAdmin, createTestDatabase, schemaTemplate, type TestDatabase } from '../../harness/pg-database.js';
import { buildApp } from '../../src/app.js';
import { loadConfig } from '../../src/config.js';

const postgres = process.argv.includes('--postgres');
const apps = Number(process.argv.slice(2).find((arg) => /^\d+$/.test(arg)) ?? 30);
if (postgres) process.env.STATELOG_TEST_PG_TEMPLATE = await schemaTemplate();

const median = (values: number[]) => values.slice().sort((a, b) => a - b)[values.length >> 1]!;
const started: number[] = [];
const closed: number[] = [];
for (let i = 0; i < apps; i++) {
  const dir = mkdtempSync(join(tmpdir(), 'statelog-app-build-'));
  let t = performance.now();
  let database: TestDatabase | null = null;
  if (postgres) database = await createTestDatabase();
  const store = database ? { STATELOG_STORE: 'postgres', DATABASE_URL: database.url } : { STATELOG_DB: join(dir, 'statelog.db') };
  const app = await buildApp(loadConfig({ ...store, LOG_LEVEL: 'silent', STATELOG_COMPACT_INTERVAL_MS: '0' }));
  await app.listen({ port: 0, host: '127.0.0.1' });
  started.push(performance.now() - t);
  t = performance.now();
  await app.close();
  await database?.drop();
  closed.push(performance.now() - t);
  rmSync(dir, { recursive: true, force: true });
}
await closeAdmin();
console.log(
  `${postgres ? 'postgres' : 'sqlite'}: an app starts in ${median(started).toFixed(1)} ms and closes in ${median(closed).toFixed(1)} ms ` +
    `(medians of ${apps}, built one after the other in one process; the first took ${started[0]!.toFixed(0)} ms)`,
);
