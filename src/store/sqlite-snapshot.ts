// A snapshot on its own read-only connection: in WAL mode a read transaction is a
// true point-in-time view, so the writer keeps committing while pages are pulled.
import Database from 'better-sqlite3';
import type { SnapshotReader, StoredEntry } from './log-store.js';
import { LIVE_ENTRIES_SQL, prefixUpperBound, takePage } from './sqlite-sql.js';

export class SqliteSnapshot implements SnapshotReader {
  readonly offset: number;
  readonly epoch: string;
  private readonly db: Database.Database;
  private readonly page: Database.Statement;
  private readonly upper: Buffer;
  private lastKey: string;

  constructor(
    path: string,
    private readonly prefix: string,
    private readonly onClose: (snapshot: SqliteSnapshot) => void = () => {},
  ) {
    this.db = new Database(path, { readonly: true, fileMustExist: true });
    this.db.pragma('busy_timeout = 5000');
    this.page = this.db.prepare(LIVE_ENTRIES_SQL);
    this.upper = prefixUpperBound(prefix);
    this.lastKey = '';
    // The first read inside BEGIN fixes the view: head and every later page see the
    // same committed state.
    this.db.exec('BEGIN');
    try {
      const meta = this.db.prepare('SELECT head, epoch FROM meta WHERE id = 1').get() as { head: number; epoch: string };
      this.offset = meta.head;
      this.epoch = meta.epoch;
    } catch (err) {
      this.close();
      throw err;
    }
  }

  async nextPage(max: number, maxChars?: number): Promise<StoredEntry[]> {
    if (!this.db.open) throw new Error('the snapshot is closed');
    const params = { lower: this.prefix, after: this.lastKey, upper: this.upper, limit: max };
    const { rows } = takePage<StoredEntry>(this.page, params, maxChars);
    if (rows.length > 0) this.lastKey = rows[rows.length - 1]!.key;
    return rows;
  }

  close(): void {
    if (!this.db.open) return;
    if (this.db.inTransaction) this.db.exec('COMMIT');
    this.db.close();
    this.onClose(this);
  }
}
