// Consumers, for both stores: named positions in the log that the server keeps for groups of
// workers. The rules of a commit, a delete and a hold's release live here; each store reads the
// row and the head in one transaction, asks these, and writes what they decide.
import type { LogPosition } from './log-store.js';

/** A consumer's row as stored. `owner` is the scoped token entry that made it ('' for unscoped callers). */
export interface ConsumerRow {
  owner: string;
  name: string;
  offset: number;
  /** The epoch the offset belongs to: a row of another epoch stands at 0 (the log was restored). */
  epoch: string;
  committedAt: number;
  /** Whether the consumer holds compaction now. */
  hold: boolean;
  /** When its hold was released for lag or age (null: never, or asked for again since). */
  holdReleasedAt: number | null;
}

/** A consumer as GET shows it. */
export interface ConsumerView {
  name: string;
  owner?: string;
  offset: number;
  epoch: string;
  committedAt: number;
  lag: number;
  hold: boolean;
  holdReleasedAt?: number;
}

export interface ConsumerCommit {
  owner: string;
  name: string;
  offset: number;
  /** The epoch the caller's offset belongs to; absent: not checked. */
  epoch?: string;
  /** Allows a position behind the stored one. */
  rewind?: boolean;
  /** Absent: the hold stays as it is (none for a new consumer). */
  hold?: boolean;
  /** If-Match: the stored offset, or '*' (the consumer exists). */
  ifMatch?: number | '*';
  /** If-None-Match: * (the consumer does not exist yet). */
  ifNoneMatch?: boolean;
}

export type ConsumerFailure =
  | { code: 'epoch_changed'; epoch: string }
  | { code: 'offset_ahead'; head: number }
  | { code: 'conflict'; currentOffset: number }
  | { code: 'precondition_failed'; currentOffset: number | null }
  | { code: 'not_found' };

export type ConsumerOutcome = { ok: true; row: ConsumerRow; position: LogPosition } | { ok: false; failure: ConsumerFailure };

export interface HoldBounds {
  /** A hold is released once the consumer's lag exceeds this many records. */
  maxRecords: number;
  /** ... or its last commit is older than this. */
  maxMs: number;
}

/** The row's offset in this epoch: positions of an earlier epoch start over at 0. */
export function positionOf(row: ConsumerRow, epoch: string): number {
  return row.epoch === epoch ? row.offset : 0;
}

export function viewOf(row: ConsumerRow, position: Pick<LogPosition, 'head' | 'epoch'>, withOwner: boolean): ConsumerView {
  const offset = positionOf(row, position.epoch);
  const view: ConsumerView = { name: row.name, offset, epoch: position.epoch, committedAt: row.committedAt, lag: Math.max(0, position.head - offset), hold: row.hold };
  if (withOwner && row.owner !== '') view.owner = row.owner;
  if (!row.hold && row.holdReleasedAt !== null) view.holdReleasedAt = row.holdReleasedAt;
  return view;
}

function conditionFailure(existing: ConsumerRow | null, current: number | null, ifMatch: number | '*' | undefined, ifNoneMatch: boolean | undefined): ConsumerFailure | null {
  if ((ifMatch === '*' && existing === null) || (typeof ifMatch === 'number' && current !== ifMatch) || (ifNoneMatch && existing !== null)) {
    return { code: 'precondition_failed', currentOffset: current };
  }
  return null;
}

/** The row a commit leaves, or why it is refused; `position` is read in the commit's transaction. */
export function decideCommit(existing: ConsumerRow | null, commit: ConsumerCommit, position: LogPosition, now: number): ConsumerOutcome {
  if (commit.epoch !== undefined && commit.epoch !== position.epoch) return { ok: false, failure: { code: 'epoch_changed', epoch: position.epoch } };
  const current = existing && positionOf(existing, position.epoch);
  const refused = conditionFailure(existing, current, commit.ifMatch, commit.ifNoneMatch);
  if (refused) return { ok: false, failure: refused };
  if (commit.offset > position.head) return { ok: false, failure: { code: 'offset_ahead', head: position.head } };
  if (current !== null && commit.offset < current && !commit.rewind) return { ok: false, failure: { code: 'conflict', currentOffset: current } };
  const hold = commit.hold ?? existing?.hold ?? false;
  // Asking for a hold again arms it anew; otherwise a release stays visible.
  const holdReleasedAt = commit.hold === true ? null : (existing?.holdReleasedAt ?? null);
  return {
    ok: true,
    row: { owner: commit.owner, name: commit.name, offset: commit.offset, epoch: position.epoch, committedAt: now, hold, holdReleasedAt },
    position,
  };
}

/** Whether a delete may go ahead: the consumer exists and If-Match holds. */
export function decideDelete(existing: ConsumerRow | null, ifMatch: number | '*' | undefined, epoch: string): ConsumerFailure | null {
  if (existing === null) return { code: 'not_found' };
  return conditionFailure(existing, positionOf(existing, epoch), ifMatch, false);
}

/** Whether a held consumer has fallen too far behind, or too long silent, to keep holding compaction. */
export function holdExceeded(row: ConsumerRow, position: Pick<LogPosition, 'head' | 'epoch'>, now: number, bounds: HoldBounds): boolean {
  return row.hold && (position.head - positionOf(row, position.epoch) > bounds.maxRecords || now - row.committedAt > bounds.maxMs);
}

/** The offset above which compaction keeps delete markers: the lowest held position (null: no hold). */
export function holdFloor(rows: readonly ConsumerRow[], epoch: string): number | null {
  let floor: number | null = null;
  for (const row of rows) if (row.hold) floor = Math.min(floor ?? Infinity, positionOf(row, epoch));
  return floor;
}

/** What each store implements: reads and writes of the consumers table, by the rules above. */
export interface ConsumerStore {
  /** Rows of `owner`, or of everyone (null), by owner then name, with the position read with them. */
  list(owner: string | null): Promise<{ rows: ConsumerRow[]; position: LogPosition }>;
  get(owner: string, name: string): Promise<{ row: ConsumerRow | null; position: LogPosition }>;
  commit(commit: ConsumerCommit, now: number): Promise<ConsumerOutcome>;
  delete(owner: string, name: string, ifMatch: number | '*' | undefined): Promise<ConsumerFailure | null>;
  /** Releases the holds past their bounds, in one transaction; returns the rows released (as they were). */
  releaseHolds(now: number, bounds: HoldBounds): Promise<ConsumerRow[]>;
}
