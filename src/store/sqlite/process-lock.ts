// One process per database file, by SQLite's fcntl lock on `<db>.lock` (docs/design.md): the holder
// keeps a read transaction open for life, so another's BEGIN EXCLUSIVE fails at once and reads its pid.
import Database from 'better-sqlite3';

export class DatabaseInUse extends Error {
  constructor(
    readonly path: string,
    readonly pid: number | null,
  ) {
    super(`in use by another statelog process${pid === null ? '' : ` (pid ${pid})`}`);
    this.name = 'DatabaseInUse';
  }
}

function isBusy(err: unknown): boolean {
  const code = (err as { code?: unknown }).code;
  return typeof code === 'string' && (code.startsWith('SQLITE_BUSY') || code.startsWith('SQLITE_LOCKED'));
}

export class ProcessLock {
  private constructor(private readonly db: Database.Database) {}

  /** Takes the lock on `dbPath`, or throws DatabaseInUse naming the holder's pid when it can be read. */
  static acquire(dbPath: string): ProcessLock {
    const db = new Database(`${dbPath}.lock`);
    // Never wait: a held lock is held for the holder's whole life.
    db.pragma('busy_timeout = 0');
    const holder = (): number | null => {
      try {
        return (db.prepare('SELECT pid FROM holder WHERE id = 1').pluck().get() as number | undefined) ?? null;
      } catch {
        return null;
      }
    };
    try {
      db.exec('BEGIN EXCLUSIVE');
      db.exec('CREATE TABLE IF NOT EXISTS holder (id INTEGER PRIMARY KEY CHECK (id = 1), pid INTEGER NOT NULL)');
      db.prepare('INSERT OR REPLACE INTO holder (id, pid) VALUES (1, ?)').run(process.pid);
      db.exec('COMMIT');
      // From here the SHARED lock of this open read transaction is the lock.
      db.exec('BEGIN');
      const pid = holder();
      // Another process took the lock between the commit and this read: it holds it now.
      if (pid !== process.pid) throw new DatabaseInUse(dbPath, pid);
    } catch (err) {
      const refusal = err instanceof DatabaseInUse ? err : isBusy(err) ? new DatabaseInUse(dbPath, holder()) : err;
      db.close();
      throw refusal;
    }
    return new ProcessLock(db);
  }

  release(): void {
    if (!this.db.open) return;
    this.db.exec('COMMIT');
    this.db.close();
  }
}
