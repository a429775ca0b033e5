// vitest globalSetup of the postgres project: the server must answer, and databases
// left behind by killed runs are dropped before this run creates its own.
import { closeAdmin, dropLeftoverDatabases, PG_ADMIN_URL } from '../../harness/pg-database.js';

export default async function setup(): Promise<void> {
  try {
    await dropLeftoverDatabases();
  } catch (err) {
    throw new Error(`the postgres test project needs a PostgreSQL server at ${PG_ADMIN_URL} (.ci/run starts one): ${(err as Error).message}`, {
      cause: err,
    });
  } finally {
    await closeAdmin();
  }
}
