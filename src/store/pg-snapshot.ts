// A snapshot on its own pooled connection: one REPEATABLE READ READ ONLY transaction
// whose first statement reads head and epoch, so every page is the state at exactly that
// offset. Pages come from a server-side cursor, FETCH by FETCH, so memory stays bounded
// and a slow reader only holds one connection open; writers are never blocked (MVCC).
import type pg from 'pg';
import type { SnapshotReader, StoredEntry } from './log-store.js';
import { prefixUpperBound, SNAPSHOT_CURSOR_SQL } from './pg-sql.js';

interface EntryRow {
  key: string;
  value: string;
  seq: number;
  ts: number;
}

export class PgSnapshot implements SnapshotReader {
  private closed = false;

  private constructor(
    private readonly client: pg.PoolClient,
    readonly offset: number,
    readonly epoch: string,
    private readonly onClose: (snapshot: PgSnapshot) => void,
  ) {}

  static async open(pool: pg.Pool, prefix: string, onClose: (snapshot: PgSnapshot) => void): Promise<PgSnapshot> {
    const client = await pool.connect();
    try {
      const results = (await client.query(
        'BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SELECT head, epoch FROM meta WHERE id = 1',
      )) as unknown as pg.QueryResult<{ head: number; epoch: string }>[];
      const meta = results[1]!.rows[0]!;
      await client.query(SNAPSHOT_CURSOR_SQL, [prefix, prefixUpperBound(prefix)]);
      return new PgSnapshot(client, meta.head, meta.epoch, onClose);
    } catch (err) {
      // The connection may be fine (a failed statement): end the transaction and reuse it.
      await client.query('ROLLBACK').then(
        () => client.release(),
        (rollbackErr: Error) => client.release(rollbackErr),
      );
      throw err;
    }
  }

  async nextPage(max: number): Promise<StoredEntry[]> {
    if (this.closed) throw new Error('the snapshot is closed');
    const count = Math.max(1, Math.floor(max));
    const { rows } = await this.client.query<EntryRow>(`FETCH FORWARD ${count} FROM snapshot`);
    return rows.map((row) => ({ key: row.key, value: row.value, offset: row.seq, ts: row.ts }));
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.onClose(this);
    // Queued behind a FETCH in flight, if any; the connection goes back to the pool after.
    this.client.query('ROLLBACK').then(
      () => this.client.release(),
      (err: Error) => this.client.release(err),
    );
  }
}
