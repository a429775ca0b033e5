// One compaction run on the PostgreSQL log, in bounded steps, on one node at a time (an advisory
// lock); each step locks the meta row as writes do, so the counters stay exact (docs/postgres.md).
import type pg from 'pg';
import { CompactionRules, lastCommittedBy, runLimits, supersededSinceAfterRun, type ScannedRecord } from '../compaction-rules.js';
import type { CompactionBudget, CompactionPass, CompactionPolicy } from '../log-store.js';
import { LOCK_NAMESPACE } from './migrations.js';

export const COMPACTION_LOCK = 2;
/** Rows per chunk: each chunk costs two round trips, so chunks are larger than SQLite's. */
const CHUNK_ROWS = 2000;
const WAIT_POLL_MS = 50;

type ChunkRow = { upto: number | null; chunkRows: number } & (ScannedRecord | { seq: null });

/** The next chunk after $1 up to the cutoff $2 (at most $3): its last offset and count, and its records not plainly superseded. */
const CHUNK_SQL = `
  WITH c AS (SELECT seq FROM log WHERE seq > $1 AND seq <= $2 ORDER BY seq LIMIT $3),
       t AS (SELECT max(seq) AS upto, count(*)::int AS "chunkRows" FROM c)
  SELECT t.upto, t."chunkRows", x.seq, x.key, x.op, x.ts, x.latest FROM t LEFT JOIN LATERAL (
    SELECT l.seq, l.key, l.op, l.ts, s.seq AS latest FROM c JOIN log l ON l.seq = c.seq
      LEFT JOIN state s ON s.key = l.key
    WHERE s.seq IS NULL OR s.seq = l.seq OR s.seq > $2
  ) x ON true ORDER BY x.seq`;

/** Removes (from, to] except the kept offsets, earlier records one by one, and forgotten keys. */
const REMOVE_SQL = `
  WITH a AS (DELETE FROM log WHERE seq > $1 AND seq <= $2 AND seq <> ALL($3::bigint[]) RETURNING 1),
       b AS (DELETE FROM log WHERE seq = ANY($4::bigint[]) RETURNING 1),
       f AS (DELETE FROM state s USING unnest($5::text[], $6::bigint[]) AS g(key, seq)
             WHERE s.key = g.key AND s.seq = g.seq RETURNING 1)
  SELECT (SELECT count(*) FROM a)::int + (SELECT count(*) FROM b)::int AS removed, (SELECT count(*) FROM f)::int AS forgotten`;

type Phase = 'wait' | 'remove' | 'done';

export class PgCompactionPass implements CompactionPass {
  removed = 0;
  tombstonesRemoved = 0;
  private cursor = 0;
  /** Set when the run takes the lock; a run that waits for another node's decides nothing. */
  private rules = new CompactionRules(0, 0);
  private released = false;

  private constructor(
    private readonly client: pg.PoolClient,
    private phase: Phase,
    private readonly budget: CompactionBudget,
    private readonly onEnd: (pass: PgCompactionPass) => void,
  ) {}

  static async start(
    pool: pg.Pool,
    policy: CompactionPolicy,
    budget: CompactionBudget,
    onEnd: (pass: PgCompactionPass) => void,
  ): Promise<PgCompactionPass> {
    const client = await pool.connect();
    try {
      const got = await tryLock(client);
      const pass = new PgCompactionPass(client, got ? 'remove' : 'wait', budget, onEnd);
      if (got) {
        const limits = runLimits(policy);
        pass.rules = new CompactionRules(await lastSeqCommittedBy(client, limits.committedBy), limits.tombstoneCutTs, limits.tombstoneCutSeq);
      }
      return pass;
    } catch (err) {
      client.release(err as Error);
      throw err;
    }
  }

  async step(): Promise<boolean> {
    if (this.released) return false;
    try {
      switch (this.phase) {
        case 'wait':
          return await this.waitStep();
        case 'remove':
          if (await this.removeStep()) return true;
          await this.end();
          return false;
        case 'done':
          return false;
      }
    } catch (err) {
      await this.end(err as Error);
      throw err;
    }
  }

  async abandon(): Promise<void> {
    await this.end();
  }

  /** The store interface's synchronous release: unlocking finishes in the background. */
  close(): void {
    void this.end().catch(() => {});
  }

  private async waitStep(): Promise<boolean> {
    await new Promise((resolve) => setTimeout(resolve, WAIT_POLL_MS));
    if (!(await tryLock(this.client))) return true;
    // The other run is over: this one joined it and has nothing left to do.
    await this.end();
    return false;
  }

  /** One removal transaction; resolves false once the cutoff is reached. */
  private async removeStep(): Promise<boolean> {
    const started = performance.now();
    const client = this.client;
    const cutoff = this.rules.cutoff;
    const locked = (await client.query(
      'BEGIN; SELECT records, state_keys AS "stateKeys" FROM meta WHERE id = 1 FOR UPDATE',
    )) as unknown as pg.QueryResult<{ records: number; stateKeys: number }>[];
    const counters = locked[1]!.rows[0]!;
    try {
      const totals = { removed: 0, keysRemoved: 0, horizon: 0 };
      let cursor = this.cursor;
      let rows = 0;
      // At least one chunk per step, whatever the clock says: a round trip can outlast maxMs.
      do {
        const size = Math.max(1, Math.min(CHUNK_ROWS, this.budget.maxRows - rows));
        const chunk = await this.removeChunk(cursor, size);
        totals.removed += chunk.removed;
        totals.keysRemoved += chunk.keysRemoved;
        totals.horizon = Math.max(totals.horizon, chunk.horizon);
        rows += size;
        cursor = chunk.to;
      } while (cursor < cutoff && rows < this.budget.maxRows && performance.now() - started < this.budget.maxMs);
      let settle = '';
      const values: (number | null)[] = [totals.removed, totals.keysRemoved, totals.horizon];
      if (cursor >= cutoff) {
        const first = await client.query<{ ts: number }>('SELECT ts FROM log WHERE seq > $1 ORDER BY seq LIMIT 1', [cutoff]);
        const left = { records: counters.records - totals.removed, stateKeys: counters.stateKeys - totals.keysRemoved };
        settle = ', superseded_since = $4';
        values.push(supersededSinceAfterRun(left, first.rows[0]?.ts ?? null));
      }
      await client.query(
        `UPDATE meta SET records = records - $1, state_keys = state_keys - $2, horizon = greatest(horizon, $3)${settle} WHERE id = 1`,
        values,
      );
      await client.query('COMMIT');
      this.cursor = cursor;
      this.removed += totals.removed;
      this.tombstonesRemoved += totals.keysRemoved;
      return cursor < cutoff;
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {});
      throw err;
    }
  }

  private async removeChunk(from: number, size: number) {
    const cutoff = this.rules.cutoff;
    const { rows } = await this.client.query<ChunkRow>(CHUNK_SQL, [from, cutoff, size]);
    const first = rows[0]!;
    // A short chunk reached the end of the range.
    const to = first.upto === null || first.chunkRows < size ? cutoff : first.upto;
    const { kept, earlier, forget, horizon } = this.rules.decide(rows.filter((row): row is ChunkRow & ScannedRecord => row.seq !== null));
    const result = await this.client.query<{ removed: number; forgotten: number }>(REMOVE_SQL, [
      from,
      to,
      [...kept],
      earlier,
      forget.map((f) => f.key),
      forget.map((f) => f.seq),
    ]);
    const { removed, forgotten } = result.rows[0]!;
    return { to, removed, keysRemoved: forgotten, horizon };
  }

  private async end(err?: Error): Promise<void> {
    if (this.released) return;
    this.released = true;
    this.phase = 'done';
    this.onEnd(this);
    // Ending the session would also free the lock; unlocking keeps the connection reusable.
    const unlocked = err
      ? Promise.reject(err)
      : this.client.query('SELECT pg_advisory_unlock_all()').then(() => undefined);
    await unlocked.then(
      () => this.client.release(),
      (failure: Error) => this.client.release(failure),
    );
  }
}

async function tryLock(client: pg.ClientBase): Promise<boolean> {
  const { rows } = await client.query<{ got: boolean }>('SELECT pg_try_advisory_lock($1, $2) AS got', [
    LOCK_NAMESPACE,
    COMPACTION_LOCK,
  ]);
  return rows[0]!.got;
}

async function lastSeqCommittedBy(client: pg.ClientBase, ts: number): Promise<number> {
  const { rows } = await client.query<{ head: number; lastTs: number }>('SELECT head, last_ts AS "lastTs" FROM meta WHERE id = 1');
  const search = lastCommittedBy(rows[0]!.head, rows[0]!.lastTs, ts);
  for (let probe = search.next(); ; ) {
    if (probe.done) return probe.value;
    const found = await client.query<{ ts: number }>('SELECT ts FROM log WHERE seq <= $1 ORDER BY seq DESC LIMIT 1', [probe.value]);
    probe = search.next(found.rows.length === 0 || found.rows[0]!.ts <= ts);
  }
}
