// A snapshot on its own pooled connection, one REPEATABLE READ READ ONLY transaction at the offset
// its first statement reads; each page continues after the last key (an index seek), bounded in size.
import type pg from 'pg';
import { entryJson, recordJson } from '../../contract/render.js';
import type { SnapshotReader, SnapshotShape, StoredEntry } from '../log-store.js';
import { prefixUpperBound, SNAPSHOT_PAGE_SQL } from './sql.js';

interface EntryRow {
  key: string;
  value: string;
  seq: number;
  ts: number;
  expires_at: number | null;
}

export class PgSnapshot implements SnapshotReader {
  private closed = false;
  /** Where the next page starts (exclusive); every key is longer than ''. */
  private lastKey = '';
  private readonly upper: string | null;

  private constructor(
    private readonly client: pg.PoolClient,
    private readonly prefix: string,
    readonly offset: number,
    readonly epoch: string,
    readonly digest: bigint,
    readonly lineage: string,
    private readonly onClose: (snapshot: PgSnapshot) => void,
  ) {
    this.upper = prefixUpperBound(prefix);
  }

  static async open(pool: pg.Pool, prefix: string, onClose: (snapshot: PgSnapshot) => void): Promise<PgSnapshot> {
    const client = await pool.connect();
    try {
      const results = (await client.query(
        'BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SELECT head, epoch, digest::text, lineage FROM meta WHERE id = 1',
      )) as unknown as pg.QueryResult<{ head: number; epoch: string; digest: string; lineage: string }>[];
      const meta = results[1]!.rows[0]!;
      return new PgSnapshot(client, prefix, meta.head, meta.epoch, BigInt(meta.digest), meta.lineage, onClose);
    } catch (err) {
      // The connection may be fine (a failed statement): end the transaction and reuse it.
      await client.query('ROLLBACK').then(
        () => client.release(),
        (rollbackErr: Error) => client.release(rollbackErr),
      );
      throw err;
    }
  }

  /** The next live keys, at most `max`, stopping at the key that brings them to `maxChars` bytes (one at least). */
  async nextPage(max: number, maxChars?: number): Promise<StoredEntry[]> {
    if (this.closed) throw new Error('the snapshot is closed');
    const limit = Math.max(1, Math.floor(max));
    const { rows } = await this.client.query<EntryRow>(SNAPSHOT_PAGE_SQL, [
      this.prefix,
      this.lastKey,
      this.upper,
      limit,
      maxChars ?? null,
    ]);
    if (rows.length > 0) this.lastKey = rows[rows.length - 1]!.key;
    return rows.map((row) => {
      const entry: StoredEntry = { key: row.key, value: row.value, offset: row.seq, ts: row.ts };
      if (row.expires_at !== null) entry.expiresAt = row.expires_at;
      return entry;
    });
  }

  async nextJson(shape: SnapshotShape, max: number, maxChars?: number): Promise<string[]> {
    const page = await this.nextPage(max, maxChars);
    return page.map((entry) =>
      shape === 'entry' ? entryJson(entry) : recordJson({ ...entry, op: 'set' }),
    );
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.onClose(this);
    // Queued behind a page in flight, if any; the connection goes back to the pool after.
    this.client.query('ROLLBACK').then(
      () => this.client.release(),
      (err: Error) => this.client.release(err),
    );
  }
}
