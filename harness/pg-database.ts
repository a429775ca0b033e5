// Throw-away PostgreSQL databases for tests and benchmarks: each test app gets its own, created through
// the `postgres` maintenance database and dropped when the app closes. Tests only ever
// talk to a server on this machine.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import pg from 'pg';
import { listMigrations } from '../src/store/migration-files.js';
import { migratePostgres, PG_MIGRATIONS_DIR } from '../src/store/postgres/migrations.js';

export const DEFAULT_PG_ADMIN_URL = 'postgres://postgres@127.0.0.1:5432/postgres';

/**
 * The maintenance database: STATELOG_TEST_PG_URL (loopback only), else the default. Read
 * when used, not at import: the pg tier's global setup may point it at an
 * embedded server it started (test/support/pg-global-setup.ts).
 */
export function pgAdminUrl(): string {
  const url = process.env.STATELOG_TEST_PG_URL || DEFAULT_PG_ADMIN_URL;
  const host = new URL(url).hostname;
  if (!['127.0.0.1', 'localhost', '[::1]'].includes(host)) {
    throw new Error(`STATELOG_TEST_PG_URL must point at this machine (127.0.0.1), not ${host}`);
  }
  return url;
}

/** Database names carry the creating process's id, so leftovers of dead runs can be found. */
export const TEST_DB_PREFIX = 'statelog_test_';

let admin: pg.Pool | null = null;
function adminPool(): pg.Pool {
  admin ??= new pg.Pool({ connectionString: pgAdminUrl(), max: 2, allowExitOnIdle: true });
  return admin;
}

let created = 0;

/** Migrated templates are named by a digest of the migrations, so a changed file makes a new one. */
const TEMPLATE_PREFIX = 'statelog_template_';

function templateName(): string {
  const digest = createHash('sha256');
  for (const { file } of listMigrations(PG_MIGRATIONS_DIR)) digest.update(file).update(readFileSync(`${PG_MIGRATIONS_DIR}/${file}`));
  return `${TEMPLATE_PREFIX}${digest.digest('hex').slice(0, 16)}`;
}

/**
 * A database holding the schema as statelog's migrations make it, to clone test databases
 * from: cloning takes a few milliseconds where migrating takes a hundred. Made once per
 * server and set of migrations; built under a name of its own and renamed into place, so
 * runs that start together never clone a half-migrated one.
 */
export async function schemaTemplate(): Promise<string> {
  const name = templateName();
  const exists = await adminPool().query('SELECT 1 FROM pg_database WHERE datname = $1', [name]);
  if (exists.rowCount) return name;
  const building = `${name}_${process.pid}`;
  await adminPool().query(`DROP DATABASE IF EXISTS ${building}`);
  await adminPool().query(`CREATE DATABASE ${building} TEMPLATE template0 ENCODING 'UTF8'`);
  const url = new URL(pgAdminUrl());
  url.pathname = `/${building}`;
  const client = new pg.Client({ connectionString: url.toString() });
  await client.connect();
  try {
    await migratePostgres(client);
  } finally {
    await client.end();
  }
  try {
    await adminPool().query(`ALTER DATABASE ${building} RENAME TO ${name}`);
  } catch (err) {
    await adminPool().query(`DROP DATABASE IF EXISTS ${building}`);
    if ((err as { code?: string }).code !== '42P04') throw err; // another run published it first
  }
  return name;
}

export interface TestDatabaseOptions {
  /**
   * No schema yet, for a test of the migrations themselves. Otherwise the database is a clone
   * of the migrated template the pg tiers' global setup made (STATELOG_TEST_PG_TEMPLATE), where
   * there is one (benchmarks have none): statelog's migrations then run when a store opens it.
   */
  empty?: boolean;
}

export interface TestDatabase {
  name: string;
  url: string;
  /** Ends statelog's sessions on the database and lets no new session in (until dropped). */
  cutOff(): Promise<void>;
  drop(): Promise<void>;
}

export async function createTestDatabase(options: TestDatabaseOptions = {}): Promise<TestDatabase> {
  const name = `${TEST_DB_PREFIX}${process.pid}_${++created}_${Math.random().toString(36).slice(2, 8)}`;
  const url = new URL(pgAdminUrl());
  url.pathname = `/${name}`;
  const template = options.empty ? undefined : process.env.STATELOG_TEST_PG_TEMPLATE;
  if (template) {
    await adminPool().query(`CREATE DATABASE ${name} TEMPLATE ${template}`);
    await newIdentity(url.toString());
  } else {
    await adminPool().query(`CREATE DATABASE ${name} TEMPLATE template0 ENCODING 'UTF8'`);
  }
  return {
    name,
    url: url.toString(),
    // From the maintenance database: a database cannot refuse connections to itself.
    cutOff: async () => {
      await adminPool().query(`ALTER DATABASE ${name} ALLOW_CONNECTIONS false`);
      await adminPool().query(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND application_name = 'statelog'`,
        [name],
      );
    },
    // FORCE: connections of a child server killed with SIGKILL may linger a moment.
    drop: async () => void (await adminPool().query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)),
  };
}

/**
 * A clone carries its template's epoch and lineage: it gets its own, as a database that
 * migrations made would (migrations/postgres/001_log.sql and 006_lineage.sql), so that no
 * two test databases pass for one log.
 */
async function newIdentity(url: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(`UPDATE meta SET epoch = replace(gen_random_uuid()::text, '-', ''),
      lineage = '1-' || substr(md5(random()::text || clock_timestamp()::text), 1, 8) || ':1' WHERE id = 1`);
  } finally {
    await client.end();
  }
}

/** Drops the test databases of processes that no longer run (runs that were killed). */
export async function dropLeftoverDatabases(): Promise<string[]> {
  const { rows } = await adminPool().query<{ datname: string }>(
    `SELECT datname FROM pg_database WHERE datname LIKE '${TEST_DB_PREFIX}%'`,
  );
  const dropped: string[] = [];
  for (const { datname } of rows) {
    const pid = Number(datname.slice(TEST_DB_PREFIX.length).split('_')[0]);
    if (pidAlive(pid)) continue;
    await adminPool().query(`DROP DATABASE IF EXISTS ${datname} WITH (FORCE)`);
    dropped.push(datname);
  }
  // Templates of other migrations, and ones left half-built (named with a process id).
  const current = templateName();
  const templates = await adminPool().query<{ datname: string }>(
    `SELECT datname FROM pg_database WHERE datname LIKE '${TEMPLATE_PREFIX}%' AND datname <> $1`,
    [current],
  );
  for (const { datname } of templates.rows) {
    const pid = Number(datname.slice(current.length + 1));
    if (datname.startsWith(`${current}_`) && pidAlive(pid)) continue;
    // Without FORCE: a template another run is cloning from stays, to be dropped next time.
    await adminPool().query(`DROP DATABASE IF EXISTS ${datname}`).then(() => dropped.push(datname), () => {});
  }
  return dropped;
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

export async function closeAdmin(): Promise<void> {
  await admin?.end();
  admin = null;
}
