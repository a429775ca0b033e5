// Consumers' holds on compaction: the offset above which a run keeps delete markers, and the
// release of holds past STATELOG_CONSUMER_HOLD_MAX_RECORDS or _MS (as PostgreSQL invalidates a
// replication slot past max_slot_wal_keep_size), checked on a timer and before every run.
import { holdFloor, type HoldBounds } from '../store/consumer-rules.js';
import type { LogStore } from '../store/log-store.js';

export interface HoldsLog {
  warn(fields: object, message: string): void;
  error(fields: object, message: string): void;
}

export class ConsumerHolds {
  /** Holds released by this process. */
  released = 0;
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly store: LogStore,
    private readonly bounds: HoldBounds,
    private readonly log: HoldsLog,
    private readonly periodMs: number,
  ) {}

  /** Releases the holds past their bounds; each is logged once, by the node that released it. */
  async release(now = Date.now()): Promise<void> {
    for (const row of await this.store.consumers.releaseHolds(now, this.bounds)) {
      this.released += 1;
      const head = this.store.position().head;
      this.log.warn(
        { consumer: row.name, owner: row.owner || undefined, offset: row.offset, committedAt: row.committedAt, head, ...this.bounds },
        'a consumer fell too far behind or stopped committing: its hold on compaction is released, and it may meet offset_compacted',
      );
    }
  }

  /** For a compaction run: the lowest held position once the holds due are released. */
  async floor(): Promise<number | null> {
    await this.release();
    const { rows, position } = await this.store.consumers.list(null);
    return holdFloor(rows, position.epoch);
  }

  start(): void {
    if (this.timer || this.periodMs === 0) return;
    this.timer = setInterval(() => void this.release().catch((err) => this.log.error({ err }, 'checking consumers\' holds failed')), this.periodMs).unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }
}
