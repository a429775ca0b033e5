// What a compaction run keeps and removes, for both stores (the rules: docs/design.md,
// "Compaction"); each store's pass scans its log in offset order and removes what it is told.
import type { CompactionPolicy } from './log-store.js';

/** A record within the cutoff that is not plainly superseded by a later one within it. */
export interface ScannedRecord {
  seq: number;
  key: string;
  op: 'set' | 'delete';
  ts: number;
  latest: number | null;
}

export interface ChunkDecisions {
  kept: Set<number>;
  /** Records of earlier chunks that a record of this chunk replaces as the one to keep. */
  earlier: number[];
  forget: { key: string; seq: number }[];
  /** The highest offset of a forgotten delete marker (0: none). */
  horizon: number;
}

/** The commit time up to which records may be removed, and the one up to which a last delete marker may. */
export function runLimits(policy: CompactionPolicy): { committedBy: number; tombstoneCutTs: number; tombstoneCutSeq: number } {
  return {
    committedBy: policy.now - policy.minLagMs,
    tombstoneCutTs: policy.now - Math.max(policy.tombstoneRetentionMs, policy.minLagMs),
    tombstoneCutSeq: policy.keepTombstonesAbove ?? Number.MAX_SAFE_INTEGER,
  };
}

// The highest offset committed at or before `ts`, by binary search: commit times never decrease
// along the log. A generator, so that a store probes synchronously or with a round trip alike.
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

/** A run's decisions, chunk after chunk in offset order; memory is bounded by the keys written after the cutoff. */
export class CompactionRules {
  /** Keys written during the run whose latest record was within the cutoff: that record is the one to keep. */
  private readonly lastOldRecord = new Map<string, number>();
  /** Other keys written after the cutoff, with their last record within it seen so far. */
  private readonly pendingOldRecord = new Map<string, number>();

  constructor(
    readonly cutoff: number,
    private readonly tombstoneCutTs: number,
    /** Delete markers above this offset stay: a consumer's hold (the horizon never passes it). */
    private readonly tombstoneCutSeq = Number.MAX_SAFE_INTEGER,
  ) {}

  // Told, inside the write's transaction, that `seq` was `key`'s latest record: a later chunk then
  // need not keep its earlier records. A rolled back write changes nothing: the last one is the same.
  superseded(key: string, seq: number): void {
    if (seq <= this.cutoff && !this.lastOldRecord.has(key)) this.lastOldRecord.set(key, seq);
  }

  decide(records: Iterable<ScannedRecord>): ChunkDecisions {
    const decisions: ChunkDecisions = { kept: new Set(), earlier: [], forget: [], horizon: 0 };
    const { kept } = decisions;
    for (const record of records) {
      if (record.latest === record.seq) {
        if (record.op === 'delete' && record.ts <= this.tombstoneCutTs && record.seq <= this.tombstoneCutSeq) {
          // Its earlier records were superseded by it within the cutoff: already gone, or going by range.
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

// When a record still in the log was superseded, at the earliest, once a run reached its cutoff:
// by a write after the cutoff. Null when no superseded record is left.
export function supersededSinceAfterRun(left: { records: number; stateKeys: number }, firstTsAfterCutoff: number | null): number | null {
  return left.records > left.stateKeys ? firstTsAfterCutoff : null;
}
