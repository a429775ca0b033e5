// Group commit. There is one writer: every write request that arrives in the same
// event-loop turn is queued, and the queue is committed as one transaction from
// setImmediate, after the turn's I/O callbacks have all run. Each request is answered
// only once that transaction is durable. While a commit is running on an asynchronous
// store (PostgreSQL), new requests wait for the next group; on SQLite the transaction
// is done when commit() returns, so the next group commits while this one waits for its
// fsync, and one fsync serves every group committed before it started (wal-syncer.ts).
import type { LogStore, WriteRequest, WriteResult } from '../store/log-store.js';

interface Pending {
  request: WriteRequest;
  resolve(result: WriteResult): void;
  reject(err: unknown): void;
}

export interface WriteBatcherOptions {
  /**
   * Called after each commit that appended records, with the head as the store knows it
   * and the number of records this group appended (not the head's move: on PostgreSQL
   * the head also moves with other nodes' commits).
   */
  onCommit?: (head: number, records: number) => void;
  /** Called after each group that committed, with how long it took to be durable. */
  onDurable?: (elapsedMs: number) => void;
  now?: () => number;
}

export class WriteBatcher {
  private queue: Pending[] = [];
  private scheduled = false;
  /** A commit whose transaction is still running (asynchronous stores). */
  private inFlight: Promise<void> | null = null;
  /** Groups whose transaction is done, waiting to be durable (SQLite). */
  private readonly awaitingSync = new Set<Promise<void>>();
  private readonly onCommit: (head: number, records: number) => void;
  private readonly onDurable: (elapsedMs: number) => void;
  private readonly now: () => number;

  constructor(
    private readonly store: LogStore,
    options: WriteBatcherOptions = {},
  ) {
    this.onCommit = options.onCommit ?? (() => {});
    this.onDurable = options.onDurable ?? (() => {});
    this.now = options.now ?? Date.now;
  }

  submit(request: WriteRequest): Promise<WriteResult> {
    return new Promise((resolve, reject) => {
      this.queue.push({ request, resolve, reject });
      this.schedule();
    });
  }

  /** Resolves once every request submitted so far has been committed and answered. */
  async drain(): Promise<void> {
    while (this.inFlight || this.queue.length > 0 || this.awaitingSync.size > 0) {
      await (this.inFlight ?? [...this.awaitingSync][0] ?? new Promise((resolve) => setImmediate(resolve)));
    }
  }

  private schedule(): void {
    if (this.scheduled || this.inFlight) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      const flushing = this.flush();
      if (this.store.appliesBeforeReturning) {
        this.awaitingSync.add(flushing);
        void flushing.finally(() => this.awaitingSync.delete(flushing));
        return;
      }
      this.inFlight = flushing.finally(() => {
        this.inFlight = null;
        if (this.queue.length > 0) this.schedule();
      });
    });
  }

  private async flush(): Promise<void> {
    const group = this.queue;
    this.queue = [];
    let results: WriteResult[];
    let head: number;
    const started = performance.now();
    try {
      const committing = this.store.commit(
        group.map((pending) => pending.request),
        this.now(),
      );
      // This group's head, before later groups commit while it waits for its fsync.
      head = this.store.position().head;
      results = await committing;
    } catch (err) {
      for (const pending of group) pending.reject(err);
      return;
    }
    this.onDurable(performance.now() - started);
    if (!this.store.appliesBeforeReturning) head = this.store.position().head;
    const appended = results.reduce((sum, result) => sum + result.appended, 0);
    if (appended > 0) this.onCommit(head, appended);
    group.forEach((pending, i) => pending.resolve(results[i]!));
  }
}
