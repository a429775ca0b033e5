// The consumers table on SQLite: each commit is one synchronous transaction on the writer's
// connection, read and decided with the head it sees (the rules: ../consumer-rules.ts).
import type Database from 'better-sqlite3';
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

const COLUMNS = `owner, name, seq AS "offset", epoch, committed_at AS committedAt, hold, hold_released_at AS holdReleasedAt`;

interface Raw extends Omit<ConsumerRow, 'hold'> {
  hold: number;
}

const rowOf = (raw: Raw | undefined): ConsumerRow | null => (raw ? { ...raw, hold: raw.hold === 1 } : null);

export class SqliteConsumers implements ConsumerStore {
  private readonly sql;

  constructor(
    private readonly db: Database.Database,
    private readonly position: () => LogPosition,
    /** With STATELOG_SYNC=full: a commit that moves no offset has no log fsync to wait for, so it syncs itself. */
    private readonly durable: boolean,
  ) {
    this.sql = {
      all: db.prepare(`SELECT ${COLUMNS} FROM consumers ORDER BY owner, name`),
      ofOwner: db.prepare(`SELECT ${COLUMNS} FROM consumers WHERE owner = ? ORDER BY name`),
      one: db.prepare(`SELECT ${COLUMNS} FROM consumers WHERE owner = ? AND name = ?`),
      held: db.prepare(`SELECT ${COLUMNS} FROM consumers WHERE hold = 1`),
      upsert: db.prepare(
        `INSERT INTO consumers (owner, name, seq, epoch, committed_at, hold, hold_released_at)
         VALUES (@owner, @name, @offset, @epoch, @committedAt, @hold, @holdReleasedAt)
         ON CONFLICT (owner, name) DO UPDATE SET seq = excluded.seq, epoch = excluded.epoch,
           committed_at = excluded.committed_at, hold = excluded.hold, hold_released_at = excluded.hold_released_at`,
      ),
      remove: db.prepare('DELETE FROM consumers WHERE owner = ? AND name = ?'),
      release: db.prepare('UPDATE consumers SET hold = 0, hold_released_at = ? WHERE owner = ? AND name = ? AND hold = 1'),
    };
  }

  async list(owner: string | null): Promise<{ rows: ConsumerRow[]; position: LogPosition }> {
    const raws = (owner === null ? this.sql.all.all() : this.sql.ofOwner.all(owner)) as Raw[];
    return { rows: raws.map((raw) => rowOf(raw)!), position: this.position() };
  }

  async get(owner: string, name: string): Promise<{ row: ConsumerRow | null; position: LogPosition }> {
    return { row: rowOf(this.sql.one.get(owner, name) as Raw | undefined), position: this.position() };
  }

  async commit(commit: ConsumerCommit, now: number): Promise<ConsumerOutcome> {
    return this.write(() => {
      const outcome = decideCommit(rowOf(this.sql.one.get(commit.owner, commit.name) as Raw | undefined), commit, this.position(), now);
      if (outcome.ok) this.sql.upsert.run({ ...outcome.row, hold: Number(outcome.row.hold) });
      return outcome;
    });
  }

  async delete(owner: string, name: string, ifMatch: number | '*' | undefined): Promise<ConsumerFailure | null> {
    return this.write(() => {
      const refused = decideDelete(rowOf(this.sql.one.get(owner, name) as Raw | undefined), ifMatch, this.position().epoch);
      if (!refused) this.sql.remove.run(owner, name);
      return refused;
    });
  }

  async releaseHolds(now: number, bounds: HoldBounds): Promise<ConsumerRow[]> {
    const position = this.position();
    const due = (this.sql.held.all() as Raw[]).map((raw) => rowOf(raw)!).filter((row) => holdExceeded(row, position, now, bounds));
    if (due.length === 0) return [];
    return this.write(() => due.filter((row) => this.sql.release.run(now, row.owner, row.name).changes === 1));
  }

  /** One IMMEDIATE transaction (as the write group's), made durable before it returns with sync = full. */
  private write<T>(work: () => T): T {
    if (!this.durable) return this.db.transaction(work).immediate();
    // In WAL mode, synchronous = FULL syncs the WAL at this commit only; the log's commits keep
    // theirs off the event loop (wal-syncer.ts). Consumer commits are rare beside them.
    this.db.pragma('synchronous = FULL');
    try {
      return this.db.transaction(work).immediate();
    } finally {
      this.db.pragma('synchronous = NORMAL');
    }
  }
}
