// Throw-away PostgreSQL databases for tests and benchmarks: each test app gets its own, created through
// the `postgres` maintenance database and dropped when the app closes. Tests only ever
// talk to a server on this machine.
import pg from 'pg';

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

export interface TestDatabase {
  name: string;
  url: string;
  /** Ends statelog's sessions on the database and lets no new session in (until dropped). */
  cutOff(): Promise<void>;
  drop(): Promise<void>;
}

export async function createTestDatabase(): Promise<TestDatabase> {
  const name = `${TEST_DB_PREFIX}${process.pid}_${++created}_${Math.random().toString(36).slice(2, 8)}`;
  await adminPool().query(`CREATE DATABASE ${name} TEMPLATE template0 ENCODING 'UTF8'`);
  const url = new URL(pgAdminUrl());
  url.pathname = `/${name}`;
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
