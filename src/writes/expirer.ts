// Deletes keys whose time to live has passed. Each expiry is an ordinary delete through
// the write batcher, conditional on the offset of the record that set the TTL, so the
// change feed, streams, mirrors, compaction and the digest see an ordinary tombstone;
// a key written again meanwhile is left alone (its condition fails). On PostgreSQL every
// node runs one: for each expiry one node's delete wins and the others' fail, so none
// is lost or doubled. Expiries are rows of the database, so they outlive any process.
import type { LogStore } from '../store/log-store.js';
import type { WriteBatcher } from './write-batcher.js';

/**
 * Keys deleted by a run's first step. Each step's deletes are submitted together, so they
 * ride the same group commit as the writes of that turn, and awaited before the next.
 */
export const EXPIRY_BATCH = 25;
/**
 * A full step means a backlog: the next one is EXPIRY_GROWTH times larger, up to
 * MAX_EXPIRY_BATCH, so the expirer keeps up with any ingest while one group of its
 * deletes stays short beside the writes that share it.
 */
export const MAX_EXPIRY_BATCH = 1000;
const EXPIRY_GROWTH = 4;

export interface ExpirerOptions {
  store: LogStore;
  batcher: WriteBatcher;
  log: { error(fields: object, message: string): void };
  /** How often due keys are looked for (a tombstone follows its expiry within about this); 0: never. */
  periodMs: number;
  batch?: number;
}

export class Expirer {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<unknown> | null = null;
  private stopped = false;
  /** Tombstones this process wrote. */
  expired = 0;
  /** Steps run (reads of due keys), for tests and benchmarks. */
  steps = 0;

  constructor(private readonly options: ExpirerOptions) {}

  start(): void {
    if (this.stopped || this.timer || this.options.periodMs === 0) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      this.running = this.run()
        .catch((err: unknown) => this.options.log.error({ err }, 'expiry failed'))
        .finally(() => {
          this.running = null;
          this.start();
        });
    }, this.options.periodMs).unref();
  }

  /** Deletes every key due now, a batch at a time; returns how many tombstones it wrote. */
  async run(now = Date.now()): Promise<number> {
    const first = this.options.batch ?? EXPIRY_BATCH;
    let batch = first;
    let written = 0;
    for (;; batch = Math.max(first, Math.min(batch * EXPIRY_GROWTH, MAX_EXPIRY_BATCH))) {
      if (this.stopped) return written;
      this.steps += 1;
      const due = await this.options.store.dueExpiries(now, batch);
      const results = await Promise.all(
        due.map(({ key, offset }) =>
          this.options.batcher.submit({ ops: [{ op: 'delete', key, ifOffset: offset, expiry: true }] }),
        ),
      );
      const appended = results.reduce((sum, result) => sum + result.appended, 0);
      written += appended;
      this.expired += appended;
      // A short batch was the last; one where nothing was written (every key taken by
      // another node or written again) is not read again in this run.
      if (due.length < batch || appended === 0) return written;
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.running;
  }
}
