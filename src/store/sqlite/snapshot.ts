// A snapshot on its own read-only connection: in WAL mode a read transaction is a
// true point-in-time view, so the writer keeps committing while pages are pulled.
import Database from 'better-sqlite3';
import type { SnapshotReader, SnapshotShape } from '../log-store.js';
import { liveEntriesParams, liveJsonSql, takePage } from './sql.js';

const sameText = (text: string): string => text;
const textLength = (text: string): number => text.length;

export class SqliteSnapshot implements SnapshotReader {
  readonly offset: number;
  readonly epoch: string;
  readonly digest: bigint;
  private readonly db: Database.Database;
  private readonly pages = new Map<SnapshotShape, Database.Statement>();
  private lastKey: string | null = null;

  constructor(
    path: string,
    private readonly prefix: string,
    private readonly onClose: (snapshot: SqliteSnapshot) => void = () => {},
  ) {
    this.db = new Database(path, { readonly: true, fileMustExist: true });
    this.db.pragma('busy_timeout = 5000');
    // The first read inside BEGIN fixes the view: head and every later page see the
    // same committed state.
    this.db.exec('BEGIN');
    try {
      const meta = this.db.prepare('SELECT head, epoch, digest FROM meta WHERE id = 1').get() as { head: number; epoch: string; digest: string };
      this.offset = meta.head;
      this.epoch = meta.epoch;
      this.digest = BigInt(`0x${meta.digest}`);
    } catch (err) {
      this.close();
      throw err;
    }
  }

  async nextJson(shape: SnapshotShape, max: number, maxChars?: number): Promise<string[]> {
    if (!this.db.open) throw new Error('the snapshot is closed');
    const statement = this.statement(shape);
    const rows = statement.iterate(liveEntriesParams(this.prefix, this.lastKey, max)) as IterableIterator<string>;
    const page = takePage(rows, sameText, textLength, maxChars).rows;
    // Where the next page starts: parsing one line a page is cheaper than a key column.
    if (page.length > 0) this.lastKey = (JSON.parse(page[page.length - 1]!) as { key: string }).key;
    return page;
  }

  close(): void {
    if (!this.db.open) return;
    if (this.db.inTransaction) this.db.exec('COMMIT');
    this.db.close();
    this.onClose(this);
  }

  private statement(shape: SnapshotShape): Database.Statement {
    let statement = this.pages.get(shape);
    if (!statement) {
      statement = this.db.prepare(liveJsonSql(shape)).pluck();
      this.pages.set(shape, statement);
    }
    return statement;
  }
}
