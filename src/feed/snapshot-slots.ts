// At most STATELOG_MAX_SNAPSHOTS snapshots stream at once: each holds a read
// transaction on its own connection (and holds back WAL checkpoints) until it ends.
import { ApiError } from '../contract/errors.js';
import type { LogStore, SnapshotReader } from '../store/log-store.js';

/** Seconds a refused client is asked to wait; a snapshot usually ends within seconds. */
const RETRY_AFTER_SECONDS = 1;

export class SnapshotSlots {
  private used = 0;

  constructor(readonly max: number) {}

  get inUse(): number {
    return this.used;
  }

  /** Opens a snapshot in a slot, or throws 429; `release` gives the slot back (once). */
  async open(store: LogStore, prefix: string): Promise<{ reader: SnapshotReader; release: () => void }> {
    const release = this.acquire();
    try {
      return { reader: await store.openSnapshot(prefix), release };
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
