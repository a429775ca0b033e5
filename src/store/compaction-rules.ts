// What a compaction run keeps and removes, for both stores; each store's pass only
// scans its log in offset order, hands the records here and removes what it is told.
//
// A run fixes a cutoff when it starts: the last offset committed at least the minimum
// lag ago. Up to the cutoff it
// - keeps each key's latest record, except a delete marker older than the tombstone
//   retention (and the lag), which goes with its key's state row and raises the horizon;
// - removes every record that a later record of its key within the cutoff superseded
//   (a store removes these by range, without looking at them one by one);
// - of a key written after the cutoff, keeps only its last record within the cutoff, so
//   that every key keeps exactly one record older than the lag.
// Records after the cutoff are never touched.
import type { CompactionPolicy } from './log-store.js';

/** A record within the cutoff that is not plainly superseded by a later one within it. */
export interface ScannedRecord {
  seq: number;
  key: string;
  op: 'set' | 'delete';
  ts: number;
  /** The offset in the key's state row; null when the key has none. */
  latest: number | null;
}

/** What to do with one chunk's scanned records. */
export interface ChunkDecisions {
  /** Offsets in the chunk to keep: everything else in it goes. */
  kept: Set<number>;
  /** Records of earlier chunks that a record of this chunk replaces as the one to keep. */
  earlier: number[];
  /** Keys whose state row goes, with the delete marker it names. */
  forget: { key: string; seq: number }[];
  /** The highest offset of a forgotten delete marker (0: none). */
  horizon: number;
}

/** The commit time up to which records may be removed, and the one up to which a last delete marker may. */
export function runLimits(policy: CompactionPolicy): { committedBy: number; tombstoneCutTs: number } {
  return {
    committedBy: policy.now - policy.minLagMs,
    tombstoneCutTs: policy.now - Math.max(policy.tombstoneRetentionMs, policy.minLagMs),
  };
}

/**
 * The highest offset committed at or before `ts`, by a binary search that yields each
 * offset to probe and is answered whether the last record at or below it was committed
 * by `ts` (true too when there is none). Commit times never decrease along the log, so
 * those records are a prefix of it. A generator, so that a store probes synchronously
 * or with a round trip alike.
 */
export function* lastCommittedBy(head: number, lastTs: number, ts: number): Generator<number, number, boolean> {
  if (ts >= lastTs || (yield head)) return head;
  let lo = 0;
  let hi = head;
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    if (yield mid) lo = mid;
    else hi = mid;
  }
  return lo;
}

/**
 * A run's decisions, chunk after chunk in offset order. Memory is bounded by the keys
 * written after the cutoff.
 */
export class CompactionRules {
  /**
   * Keys written during the run whose latest record was within the cutoff until then,
   * with that record: it is the key's last one within the cutoff, the one to keep.
   */
  private readonly lastOldRecord = new Map<string, number>();
  /**
   * Other keys written after the cutoff, with the last record within the cutoff seen so
   * far: it is kept until a later one turns up.
   */
  private readonly pendingOldRecord = new Map<string, number>();

  constructor(
    readonly cutoff: number,
    private readonly tombstoneCutTs: number,
  ) {}

  /**
   * Told by a store that sees its own writes (inside the write's transaction) that `seq`
   * was `key`'s latest record until now: a later chunk then need not keep its earlier
   * records for a while. A rolled back write changes nothing: the key's last record
   * within the cutoff is the same whoever supersedes it.
   */
  superseded(key: string, seq: number): void {
    if (seq <= this.cutoff && !this.lastOldRecord.has(key)) this.lastOldRecord.set(key, seq);
  }

  decide(records: Iterable<ScannedRecord>): ChunkDecisions {
    const decisions: ChunkDecisions = { kept: new Set(), earlier: [], forget: [], horizon: 0 };
    const { kept } = decisions;
    for (const record of records) {
      if (record.latest === record.seq) {
        if (record.op === 'delete' && record.ts <= this.tombstoneCutTs) {
          // Its key's earlier records are all gone by now: they were superseded by it,
          // within the cutoff, and lie in earlier chunks or go by range in this one.
          decisions.forget.push({ key: record.key, seq: record.seq });
          decisions.horizon = record.seq;
        } else {
          kept.add(record.seq);
        }
      } else if (record.latest !== null) {
        // The key was written after the cutoff: keep only its last record within it.
        const last = this.lastOldRecord.get(record.key);
        if (last !== undefined) {
          if (record.seq === last) kept.add(record.seq);
          continue;
        }
        const previous = this.pendingOldRecord.get(record.key);
        // One in this chunk goes with the chunk's range once it is no longer kept.
        if (previous !== undefined && !kept.delete(previous)) decisions.earlier.push(previous);
        this.pendingOldRecord.set(record.key, record.seq);
        kept.add(record.seq);
      }
      // A record whose key has left the state cannot exist; were one found, it goes.
    }
    return decisions;
  }
}

/**
 * The lower bound of when a record still in the log was superseded, once a run has
 * reached its cutoff: every record superseded within the cutoff is gone, so whatever
 * superseded one still left was written after it, no earlier than the first record
 * after the cutoff. Null when no superseded record is left.
 */
export function supersededSinceAfterRun(left: { records: number; stateKeys: number }, firstTsAfterCutoff: number | null): number | null {
  return left.records > left.stateKeys ? firstTsAfterCutoff : null;
}
