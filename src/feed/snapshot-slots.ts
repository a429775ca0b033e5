// At most STATELOG_MAX_SNAPSHOTS snapshots stream at once: each holds a spool file (and,
// while it is being spooled, a read transaction on its own connection) until it ends.
import type { ReadFilter } from '../contract/key-scope.js';
import type { LogStore, SnapshotShape } from '../store/log-store.js';
import { ScopedSnapshot } from './scoped-reads.js';
import { Slots } from './slots.js';
import { spoolSnapshot, type SpoolBudget, type SpooledSnapshot, type SpoolOptions } from './snapshot-spool.js';

export interface SpoolSettings {
  dir: string;
  budget: SpoolBudget;
}

export class SnapshotSlots extends Slots {
  constructor(
    max: number,
    private readonly spool: SpoolSettings,
  ) {
    super(max, 'snapshots are already streaming');
  }

  /**
   * Opens a snapshot of the keys with `prefix` (and, given `within`, only those within
   * its prefixes) in a slot, its spooling started (see spoolSnapshot), or throws 429 (no
   * slot) or 503 (no room to spool); `release` gives the slot back (once).
   */
  async open(
    store: LogStore,
    prefix: string,
    shape: SnapshotShape,
    { within, ...options }: SpoolOptions & Pick<ReadFilter, 'within'> = {},
  ): Promise<{ reader: SpooledSnapshot; release: () => void }> {
    const release = this.acquire();
    try {
      const opened = await store.openSnapshot(prefix);
      const scoped = within ? new ScopedSnapshot(opened, within) : opened;
      const reader = await spoolSnapshot(scoped, shape, this.spool.dir, this.spool.budget, options);
      return { reader, release };
    } catch (err) {
      release();
      throw err;
    }
  }
}
