// The consumers table on PostgreSQL, shared by every node: a commit or delete takes an advisory
// lock on its consumer for the transaction, so racing commits of one name on any node decide in
// turn, each with the row and the head as the last one left them (rules: ../consumer-rules.ts).
import type pg from 'pg';
import {
  decideCommit,
  decideDelete,
  holdExceeded,
  type ConsumerCommit,
  type ConsumerFailure,
  type ConsumerOutcome,
  type ConsumerRow,
  type ConsumerStore,
  type HoldBounds,
} from '../consumer-rules.js';
import type { LogPosition } from '../log-store.js';
import { LOCK_NAMESPACE } from './migrations.js';
import { translate } from '../store-errors.js';
import { postgresErrorKinds } from './errors.js';

const COLUMNS = `owner, name, seq AS "offset", epoch, committed_at AS "committedAt", hold, hold_released_at AS "holdReleasedAt"`;
const POSITION_SQL = 'SELECT head, horizon, epoch FROM meta WHERE id = 1';
// The one-key form of advisory locks: a key space apart from the two-key locks of migrations and compaction.
const LOCK_SQL = 'SELECT pg_advisory_xact_lock(hashtextextended($1 || $2 || $3, $4))';
const ONE_SQL = `SELECT ${COLUMNS} FROM consumers WHERE owner = $1 AND name = $2`;
const UPSERT_SQL = `
  INSERT INTO consumers (owner, name, seq, epoch, committed_at, hold, hold_released_at) VALUES ($1, $2, $3, $4, $5, $6, $7)
  ON CONFLICT (owner, name) DO UPDATE SET seq = EXCLUDED.seq, epoch = EXCLUDED.epoch, committed_at = EXCLUDED.committed_at,
    hold = EXCLUDED.hold, hold_released_at = EXCLUDED.hold_released_at`;

export class PgConsumers implements ConsumerStore {
  constructor(
    private readonly pool: pg.Pool,
    private readonly learn: (position: LogPosition) => void,
  ) {}

  async list(owner: string | null): Promise<{ rows: ConsumerRow[]; position: LogPosition }> {
    return this.read(async (client) => {
      const { rows } =
        owner === null
          ? await client.query<ConsumerRow>(`SELECT ${COLUMNS} FROM consumers ORDER BY owner, name`)
          : await client.query<ConsumerRow>(`SELECT ${COLUMNS} FROM consumers WHERE owner = $1 ORDER BY name`, [owner]);
      return rows;
    });
  }

  async get(owner: string, name: string): Promise<{ row: ConsumerRow | null; position: LogPosition }> {
    const { rows, position } = await this.read(async (client) => (await client.query<ConsumerRow>(ONE_SQL, [owner, name])).rows);
    return { row: rows[0] ?? null, position };
  }

  async commit(commit: ConsumerCommit, now: number): Promise<ConsumerOutcome> {
    return this.locked(commit.owner, commit.name, async (client, existing, position) => {
      const outcome = decideCommit(existing, commit, position, now);
      if (outcome.ok) {
        const row = outcome.row;
        await client.query(UPSERT_SQL, [row.owner, row.name, row.offset, row.epoch, row.committedAt, row.hold, row.holdReleasedAt]);
      }
      return outcome;
    });
  }

  async delete(owner: string, name: string, ifMatch: number | '*' | undefined): Promise<ConsumerFailure | null> {
    return this.locked(owner, name, async (client, existing, position) => {
      const refused = decideDelete(existing, ifMatch, position.epoch);
      if (!refused) await client.query('DELETE FROM consumers WHERE owner = $1 AND name = $2', [owner, name]);
      return refused;
    });
  }

  async releaseHolds(now: number, bounds: HoldBounds): Promise<ConsumerRow[]> {
    const { rows: held, position } = await this.read(
      async (client) => (await client.query<ConsumerRow>(`SELECT ${COLUMNS} FROM consumers WHERE hold`)).rows,
    );
    const released: ConsumerRow[] = [];
    for (const row of held.filter((candidate) => holdExceeded(candidate, position, now, bounds))) {
      // Only if no commit came in between: a node that released it, or a commit, changed the row.
      const { rowCount } = await translated(
        this.pool.query('UPDATE consumers SET hold = false, hold_released_at = $1 WHERE owner = $2 AND name = $3 AND hold AND committed_at = $4', [
          now,
          row.owner,
          row.name,
          row.committedAt,
        ]),
      );
      if (rowCount === 1) released.push(row);
    }
    return released;
  }

  /** Rows and the position, read in one snapshot. */
  private async read<T>(work: (client: pg.ClientBase) => Promise<T>): Promise<{ rows: T; position: LogPosition }> {
    const read = await this.transaction('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY', async (client) => {
      const rows = await work(client);
      return { rows, position: (await client.query<LogPosition>(POSITION_SQL)).rows[0]! };
    });
    this.learn(read.position);
    return read;
  }

  private locked<T>(owner: string, name: string, work: (client: pg.ClientBase, existing: ConsumerRow | null, position: LogPosition) => Promise<T>): Promise<T> {
    return this.transaction('BEGIN', async (client) => {
      await client.query(LOCK_SQL, [owner, ' ', name, LOCK_NAMESPACE]);
      // Read after the lock: the head as of now, with every commit that held it before.
      const position = (await client.query<LogPosition>(POSITION_SQL)).rows[0]!;
      const existing = (await client.query<ConsumerRow>(ONE_SQL, [owner, name])).rows[0] ?? null;
      this.learn(position);
      return work(client, existing, position);
    });
  }

  /** The work in a transaction; its failure told by kind (an unreachable database is a 503, not a 500). */
  private transaction<T>(begin: string, work: (client: pg.ClientBase) => Promise<T>): Promise<T> {
    return translated(this.untranslated(begin, work));
  }

  private async untranslated<T>(begin: string, work: (client: pg.ClientBase) => Promise<T>): Promise<T> {
    const client = await this.pool.connect();
    let broken: Error | undefined;
    try {
      await client.query(begin);
      const result = await work(client);
      await client.query('COMMIT');
      return result;
    } catch (err) {
      // A connection that cannot even roll back is dropped.
      await client.query('ROLLBACK').catch((rollbackErr: Error) => (broken = rollbackErr));
      throw err;
    } finally {
      client.release(broken);
    }
  }
}

/** The query's failure told by kind, as the store's own methods' are. */
async function translated<T>(work: Promise<T>): Promise<T> {
  try {
    return await work;
  } catch (err) {
    throw translate(err, postgresErrorKinds);
  }
}
