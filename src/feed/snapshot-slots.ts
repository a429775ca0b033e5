// At most STATELOG_MAX_SNAPSHOTS snapshots stream at once: each holds a spool file (and,
// while it is being spooled, a read transaction on its own connection) until it ends.
import { ApiError } from '../contract/errors.js';
import type { LogStore, SnapshotReader, SnapshotShape } from '../store/log-store.js';
import { spoolSnapshot, type SpoolBudget } from './snapshot-spool.js';

export interface SpoolSettings {
  dir: string;
  budget: SpoolBudget;
}

/** Seconds a refused client is asked to wait; a snapshot usually ends within seconds. */
const RETRY_AFTER_SECONDS = 1;

export class SnapshotSlots {
  private used = 0;

  constructor(
    readonly max: number,
    private readonly spool: SpoolSettings,
  ) {}

  get inUse(): number {
    return this.used;
  }

  /**
   * Opens a snapshot in a slot, spooled whole before this resolves, or throws 429 (no
   * slot) or 503 (no room to spool); `release` gives the slot back (once).
   */
  async open(
    store: LogStore,
    prefix: string,
    shape: SnapshotShape,
    signal?: AbortSignal,
  ): Promise<{ reader: SnapshotReader; release: () => void }> {
    const release = this.acquire();
    try {
      const reader = await spoolSnapshot(await store.openSnapshot(prefix), shape, this.spool.dir, this.spool.budget, signal);
      return { reader, release };
    } catch (err) {
      release();
      throw err;
    }
  }

  /** Takes a slot, or throws 429 when all are taken. The returned function gives it back (once). */
  acquire(): () => void {
    if (this.used >= this.max) {
      throw new ApiError(
        'too_many_requests',
        `${this.max} snapshots are already streaming; retry in a moment`,
        { limit: this.max },
        { 'retry-after': String(RETRY_AFTER_SECONDS) },
      );
    }
    this.used += 1;
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      this.used -= 1;
    };
  }
}
