// How far the shared log is durable (flushed, and confirmed by a synchronous standby when there
// is one), like Kafka's high watermark. Commits append under the meta row's lock without waiting
// for their WAL flush, so the lock is held for the append alone; a barrier then makes every earlier
// commit durable at once: a transaction that writes WAL commits synchronously, and PostgreSQL
// flushes and replicates WAL in order. Nothing is answered beyond what is durable: a write waits
// for a barrier that covers its offsets, a read for one that covers the head it shows.
// A barrier's head is then told to the other nodes on its own, never by a barrier: a transaction
// that notifies holds PostgreSQL's instance-wide notification lock from its commit's start to its
// end, which for a barrier is the WAL flush and the standby's confirmation (docs/postgres.md).

export interface Barriers {
  /** Commits synchronously and returns the head its statement saw (all durable now). */
  run(): Promise<number>;
  /** Tells the other nodes of a durable head, in a transaction that waits for no flush. */
  announce(head: number): void;
}

export class NotDurable extends Error {
  constructor(offset: number, withinMs: number) {
    super(`the log was not durable up to offset ${offset} within ${withinMs} ms: commits are not completing`);
    this.name = 'NotDurable';
  }
}

interface Waiter {
  offset: number;
  resolve(): void;
  reject(err: unknown): void;
}

export class DurableHead {
  private durable = 0;
  private waiters: Waiter[] = [];
  private running = false;
  private resets = 0;

  /** `barriers` undefined: every commit is acknowledged as the server makes it (STATELOG_SYNC=normal). */
  constructor(private readonly barriers: Barriers | undefined) {}

  get value(): number {
    return this.barriers ? this.durable : Number.MAX_SAFE_INTEGER;
  }

  /** A head another node's barrier made durable (its notification). */
  learn(head: number): void {
    if (head > this.durable) this.durable = head;
    this.settle();
  }

  /** The database may be another one now (a failover): nothing is taken as durable until a barrier says so. */
  reset(): void {
    this.durable = 0;
    this.resets += 1;
  }

  /**
   * Resolves once every offset up to `offset` is durable; rejects with the barrier's failure, or
   * after `withinMs` with a NotDurable (the wait is then forgotten, not left to pile up in an outage).
   */
  cover(offset: number, withinMs?: number): Promise<void> {
    if (offset <= this.value) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const waiter: Waiter = { offset, resolve, reject };
      if (withinMs !== undefined) {
        const timer = setTimeout(() => {
          this.waiters = this.waiters.filter((other) => other !== waiter);
          reject(new NotDurable(offset, withinMs));
        }, withinMs);
        waiter.resolve = () => {
          clearTimeout(timer);
          resolve();
        };
        waiter.reject = (err) => {
          clearTimeout(timer);
          reject(err);
        };
      }
      this.waiters.push(waiter);
      this.run();
    });
  }

  /** One barrier at a time: those who wait meanwhile share the next. */
  private run(): void {
    const { barriers } = this;
    if (this.running || !barriers || this.waiters.length === 0) return;
    this.running = true;
    // Only offsets committed before the barrier's statement began are covered by it.
    const waiting = new Set(this.waiters);
    const resets = this.resets;
    barriers.run().then(
      (head) => {
        this.running = false;
        if (resets === this.resets) {
          this.learn(head);
          barriers.announce(head);
          this.run();
          return;
        }
        // A reset overtook it: the database may be another one now, so its head answers the
        // waits it was run for but is neither kept nor told to the other nodes.
        this.settle(head, waiting);
        this.run();
      },
      (err: unknown) => {
        this.running = false;
        for (const waiter of waiting) waiter.reject(err);
        this.waiters = this.waiters.filter((waiter) => !waiting.has(waiter));
        this.run();
      },
    );
  }

  /** Answers the waits up to `upTo` (only those `among`, when given). */
  private settle(upTo = this.durable, among?: ReadonlySet<Waiter>): void {
    if (this.waiters.length === 0) return;
    const still: Waiter[] = [];
    for (const waiter of this.waiters) {
      if (waiter.offset <= upTo && (!among || among.has(waiter))) waiter.resolve();
      else still.push(waiter);
    }
    this.waiters = still;
  }
}
