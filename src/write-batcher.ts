// Group commit. There is one writer: every write request that arrives in the same
// event-loop turn is queued, and the queue is committed as one transaction (one fsync)
// from setImmediate, after the turn's I/O callbacks have all run. Each request is
// answered only once that transaction has committed. While a commit is running (an
// asynchronous store), new requests wait for the next group.
import type { LogStore, WriteRequest, WriteResult } from './store/log-store.js';

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
  now?: () => number;
}

export class WriteBatcher {
  private queue: Pending[] = [];
  private scheduled = false;
  private inFlight: Promise<void> | null = null;
  private readonly onCommit: (head: number, records: number) => void;
  private readonly now: () => number;

  constructor(
    private readonly store: LogStore,
    options: WriteBatcherOptions = {},
  ) {
    this.onCommit = options.onCommit ?? (() => {});
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
    while (this.inFlight || this.queue.length > 0) {
      await (this.inFlight ?? new Promise((resolve) => setImmediate(resolve)));
    }
  }

  private schedule(): void {
    if (this.scheduled || this.inFlight) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      this.inFlight = this.flush().finally(() => {
        this.inFlight = null;
        if (this.queue.length > 0) this.schedule();
      });
    });
  }

  private async flush(): Promise<void> {
    const group = this.queue;
    this.queue = [];
    let results: WriteResult[];
    try {
      results = await this.store.commit(
        group.map((pending) => pending.request),
        this.now(),
      );
    } catch (err) {
      for (const pending of group) pending.reject(err);
      return;
    }
    const appended = results.reduce((sum, result) => sum + result.appended, 0);
    if (appended > 0) this.onCommit(this.store.position().head, appended);
    group.forEach((pending, i) => pending.resolve(results[i]!));
  }
}
