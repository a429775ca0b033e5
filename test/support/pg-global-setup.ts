// vitest globalSetup of the PostgreSQL tiers (test/tiers.ts): a PostgreSQL server must answer at
// STATELOG_TEST_PG_URL (default 127.0.0.1:5432, user postgres). When none does, an
// embedded one is started for the run (test/support/embedded-postgres.ts) and the test
// processes are pointed at it. Databases left behind by killed runs are dropped first, and
// the migrated schema is made once as a template that test databases are cloned from.
import { startEmbeddedPostgres, type EmbeddedServer } from './embedded-postgres.js';
import { closeAdmin, dropLeftoverDatabases, pgAdminUrl, schemaTemplate } from '../../harness/pg-database.js';

/** Codes of a server that is there but refuses the role: a password or a pg_hba.conf entry is missing. */
const ROLE_REFUSED = new Set(['28P01', '28000']);

/** Why there is no server to use at the URL, or null when the error is anything else. */
function noServer(err: unknown, explicitUrl: boolean): string | null {
  const code = (err as { code?: string }).code;
  const message = (err as Error).message ?? '';
  if (code === 'ECONNREFUSED' || (err instanceof AggregateError && err.errors.some((e) => (e as { code?: string }).code === 'ECONNREFUSED'))) {
    return 'nothing listens there';
  }
  // A named URL with the wrong credentials is the user's to fix, not to work around.
  if (!explicitUrl && (ROLE_REFUSED.has(code ?? '') || /password/i.test(message))) {
    return `the server there refuses the postgres role without a password (${message})`;
  }
  return null;
}

async function tryServer(): Promise<unknown> {
  try {
    await dropLeftoverDatabases();
    return null;
  } catch (err) {
    return err;
  } finally {
    await closeAdmin();
  }
}

export default async function setup(): Promise<() => Promise<void>> {
  const url = pgAdminUrl();
  const explicitUrl = Boolean(process.env.STATELOG_TEST_PG_URL);
  let embedded: EmbeddedServer | null = null;
  const err = await tryServer();
  if (err) {
    const why = noServer(err, explicitUrl);
    if (!why) {
      throw new Error(`the postgres test project cannot use the PostgreSQL server at ${url}: ${(err as Error).message}`, { cause: err });
    }
    const started = Date.now();
    embedded = await startEmbeddedPostgres();
    // Read by test/support/pg-database.ts in this process and in every test process.
    process.env.STATELOG_TEST_PG_URL = embedded.url;
    console.log(`postgres tests: no usable PostgreSQL at ${url} (${why}); started an embedded one at ${embedded.url} in ${Date.now() - started} ms`);
  }
  // Read by test/support/store-access.ts and test/postgres/fixtures.ts in every test process.
  process.env.STATELOG_TEST_PG_TEMPLATE = await schemaTemplate();
  await closeAdmin();
  return async () => {
    await embedded?.stop();
  };
}
