// A snapshot on its own pooled connection: one REPEATABLE READ READ ONLY transaction
// whose first statement reads head and epoch, so every page is the state at exactly that
// offset. Pages come from a server-side cursor, FETCH by FETCH, so memory stays bounded
// and a slow reader only holds one connection open; writers are never blocked (MVCC).
import type pg from 'pg';
import { entryJson, recordJson } from '../render.js';
import type { SnapshotReader, SnapshotShape, StoredEntry } from './log-store.js';
import { prefixUpperBound, SNAPSHOT_CURSOR_SQL } from './pg-sql.js';

/** Rows of a page's first FETCH when its size is bounded, before value sizes are known. */
const FIRST_FETCH = 8;

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

  /**
   * The next live keys, at most `max`. With `maxChars` (the changes branch's addition to
   * SnapshotReader) the page stops once its keys and values hold that many characters;
   * the cursor is then read in FETCHes sized from the values seen so far, so a page of
   * large values is not pulled whole (it may end a few rows past the bound).
   */
  async nextPage(max: number, maxChars?: number): Promise<StoredEntry[]> {
    if (this.closed) throw new Error('the snapshot is closed');
    const limit = Math.max(1, Math.floor(max));
    const page: StoredEntry[] = [];
    let chars = 0;
    while (page.length < limit && (maxChars === undefined || chars < maxChars)) {
      let count = limit - page.length;
      if (maxChars !== undefined && page.length > 0) {
        const perRow = chars / page.length;
        count = Math.max(1, Math.min(count, Math.floor((maxChars - chars) / perRow)));
      } else if (maxChars !== undefined) {
        count = Math.min(count, FIRST_FETCH);
      }
      const { rows } = await this.client.query<EntryRow>(`FETCH FORWARD ${count} FROM snapshot`);
      // Every fetched row is kept: the cursor has moved past it.
      for (const row of rows) {
        page.push({ key: row.key, value: row.value, offset: row.seq, ts: row.ts });
        chars += row.key.length + row.value.length;
      }
      if (rows.length < count) break;
    }
    return page;
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
    // Queued behind a FETCH in flight, if any; the connection goes back to the pool after.
    this.client.query('ROLLBACK').then(
      () => this.client.release(),
      (err: Error) => this.client.release(err),
    );
  }
}
