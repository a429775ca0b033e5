// Deletes keys whose time to live has passed. Each expiry is an ordinary delete through
// the write batcher, conditional on the offset of the record that set the TTL, so the
// change feed, streams, mirrors, compaction and the digest see an ordinary tombstone;
// a key written again meanwhile is left alone (its condition fails). On PostgreSQL every
// node runs one: for each expiry one node's delete wins and the others' fail, so none
// is lost or doubled. Expiries are rows of the database, so they outlive any process.
import type { LogStore } from '../store/log-store.js';
import type { WriteBatcher } from './write-batcher.js';

/**
 * Keys read by a run's first step. A step's deletes go to the batcher's expiry lane
 * together and are awaited before the next step; the batcher paces them over its group
 * commits, writers first (write-batcher.ts), so a step's size sets how far ahead the
 * expirer reads, not what a writer waits for.
 */
export const EXPIRY_BATCH = 25;
/**
 * A full step means a backlog: the next one is EXPIRY_GROWTH times larger, up to
 * MAX_EXPIRY_BATCH, or up to twice the records other writers appended during the last
 * step when that is more: under ingest the expirer reads due keys faster than they are
 * written, and the batcher, which gives a group EXPIRIES_PER_TTL_WRITE deletes for each
 * of its writers' TTL sets, commits them as fast, so the backlog shrinks.
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
  /** The first step of the next run, when the last one ended in a backlog. */
  private carried = 0;

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

  /**
   * Deletes every key due, a batch at a time, until a step finds fewer than it asked
   * for; returns how many tombstones it wrote. Each step reads what is due at its own
   * start (keys that come due during a long run are taken in it), unless `now` is given.
   */
  async run(now?: number): Promise<number> {
    const { store, batcher } = this.options;
    const first = this.options.batch ?? EXPIRY_BATCH;
    let batch = Math.max(first, this.carried);
    this.carried = 0;
    let written = 0;
    const stepsBefore = this.steps;
    for (;;) {
      if (this.stopped) return written;
      this.steps += 1;
      const before = store.position().head;
      const due = await store.dueExpiries(now ?? Date.now(), batch);
      const results = await Promise.all(
        due.map(({ key, offset }) =>
          batcher.submitExpiry({ ops: [{ op: 'delete', key, ifOffset: offset, expiry: true }] }),
        ),
      );
      const appended = results.reduce((sum, result) => sum + result.appended, 0);
      written += appended;
      this.expired += appended;
      // A short batch was the last; one where nothing was written (every key taken by
      // another node or written again) is not read again in this run.
      if (due.length < batch || appended === 0) {
        // Keys kept coming due during the run: the next one starts about where it ended.
        if (this.steps - stepsBefore > 1) this.carried = Math.min(due.length, MAX_EXPIRY_BATCH);
        return written;
      }
      // What others wrote meanwhile is about what comes due per step later on: twice
      // that keeps up and also takes the backlog down.
      const others = store.position().head - before - appended;
      batch = Math.max(first, Math.min(batch * EXPIRY_GROWTH, Math.max(MAX_EXPIRY_BATCH, 2 * others)));
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.running;
  }
}
