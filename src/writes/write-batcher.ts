// Group commit. There is one writer: every write request that arrives in the same
// event-loop turn is queued, and the queue is committed as one transaction from
// setImmediate, after the turn's I/O callbacks have all run. Each request is answered
// only once that transaction is durable. The next group commits once this one is applied,
// while it waits for durability: on SQLite when commit() returns, and one fsync serves every
// group committed before it started (wal-syncer.ts); on PostgreSQL when the store says so
// (onApplied), and one barrier serves every group appended before it (durable-head.ts).
//
// The expirer's deletes wait in a lane of their own (submitExpiry) and are paced here,
// so that writers never wait behind many of them. A group takes every writer's request
// first, then from the lane EXPIRIES_PER_TTL_WRITE deletes for each op of its writers
// that sets a TTL (ingest with TTLs pays for its own expiry, so the deletes keep pace
// with any such ingest), then EXPIRIES_PER_COMMIT more if the expiry's time share
// allows: the deletes' part of such a group's commit time, times
// (1 / EXPIRY_TIME_SHARE - 1), passes before the next group takes those. The rest of
// the lane waits for later groups; with no writer about, a group of deletes alone
// commits as soon as the share allows (docs/ttl-and-digest.md).
import { databaseUnavailable } from '../contract/errors.js';
import type { LogStore, WriteRequest, WriteResult } from '../store/log-store.js';
import { StoreError } from '../store/store-errors.js';

/**
 * The deletes a group takes beyond what its writers' TTLs pay for, when the time share
 * allows: about a millisecond of a commit (bench/writes/expiry.ts).
 */
export const EXPIRIES_PER_COMMIT = 100;
/**
 * Deletes a group takes for each op of its writers that sets a TTL: more than one for
 * one, so that a backlog left by a pause shrinks while the ingest goes on
 * (bench/writes/expiry-pace.ts).
 */
export const EXPIRIES_PER_TTL_WRITE = 4;
/**
 * The share of the time the deletes beyond the writers' TTLs may take: writers beside a
 * mass expiry keep the rest of the event loop (SQLite) or of the commits (PostgreSQL).
 */
export const EXPIRY_TIME_SHARE = 0.25;

interface Pending {
  request: WriteRequest;
  resolve(result: WriteResult): void;
  reject(err: unknown): void;
  /** Set once its group's commit is sent: past its deadline, its outcome is unknown. */
  committing?: boolean;
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
  /**
   * Every request is answered within this (ms): a commit that has not completed by then is left to
   * resolve on its connection, and its requests get 503 with an unknown outcome; requests still
   * queued behind it are taken out, unwritten (STATELOG_WRITE_TIMEOUT_MS).
   */
  deadlineMs?: number;
}

export class WriteBatcher {
  private queue: Pending[] = [];
  /** The expirer's requests not yet in a group, oldest first. */
  private expiries: Pending[] = [];
  private scheduled = false;
  /** performance.now() before which no group takes EXPIRIES_PER_COMMIT deletes. */
  private expiryShareAt = 0;
  /** Schedules a group of deletes alone once the time share allows it. */
  private expiryTimer: NodeJS.Timeout | null = null;
  /** A commit whose transaction is still running (asynchronous stores). */
  private inFlight: Promise<void> | null = null;
  /** Groups whose transaction is done, waiting to be durable (SQLite). */
  private readonly awaitingSync = new Set<Promise<void>>();
  private readonly onCommit: (head: number, records: number) => void;
  private readonly onDurable: (elapsedMs: number) => void;
  private readonly now: () => number;
  private readonly deadlineMs: number | undefined;

  constructor(
    private readonly store: LogStore,
    options: WriteBatcherOptions = {},
  ) {
    this.onCommit = options.onCommit ?? (() => {});
    this.onDurable = options.onDurable ?? (() => {});
    this.now = options.now ?? Date.now;
    this.deadlineMs = options.deadlineMs;
  }

  submit(request: WriteRequest): Promise<WriteResult> {
    return this.enqueue(this.queue, request);
  }

  /** One of the expirer's deletes: it goes into a later group, after writers' requests, as the lane's pace allows. */
  submitExpiry(request: WriteRequest): Promise<WriteResult> {
    return this.enqueue(this.expiries, request);
  }

  private enqueue(into: Pending[], request: WriteRequest): Promise<WriteResult> {
    return new Promise((resolve, reject) => {
      const deadlineMs = this.deadlineMs;
      if (deadlineMs === undefined) {
        into.push({ request, resolve, reject });
      } else {
        const timer = setTimeout(() => this.expire(into, pending, deadlineMs), deadlineMs);
        const pending: Pending = {
          request,
          resolve: (result) => (clearTimeout(timer), resolve(result)),
          reject: (err) => (clearTimeout(timer), reject(err)),
        };
        into.push(pending);
      }
      this.schedule();
    });
  }

  /** A request past its deadline: out of the queue if its group was not sent, else of unknown outcome. */
  private expire(queue: Pending[], pending: Pending, deadlineMs: number): void {
    if (pending.committing) {
      const stuck = new Error(`the commit did not complete within ${deadlineMs} ms (STATELOG_WRITE_TIMEOUT_MS); it may still complete`);
      return pending.reject(new StoreError('outcome_unknown', stuck));
    }
    const at = queue.indexOf(pending);
    if (at >= 0) queue.splice(at, 1);
    pending.reject(databaseUnavailable(`the write could not be committed within ${deadlineMs} ms (STATELOG_WRITE_TIMEOUT_MS): nothing of it was written`, { outcome: 'not_written' }));
  }

  /** Resolves once every request submitted so far has been committed and answered. */
  async drain(): Promise<void> {
    while (this.inFlight || this.queue.length > 0 || this.expiries.length > 0 || this.awaitingSync.size > 0) {
      await (this.inFlight ?? [...this.awaitingSync][0] ?? new Promise((resolve) => setImmediate(resolve)));
    }
  }

  private schedule(): void {
    if (this.scheduled || this.inFlight) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      if (this.queue.length === 0 && !this.expiriesAloneNow()) return;
      let applied!: () => void;
      const appliedOrSettled = new Promise<void>((resolve) => (applied = resolve));
      const flushing = this.flush(applied);
      this.awaitingSync.add(flushing);
      void flushing.finally(() => this.awaitingSync.delete(flushing));
      if (this.store.appliesBeforeReturning) {
        if (this.expiries.length > 0) this.schedule();
        return;
      }
      this.inFlight = Promise.race([appliedOrSettled, flushing]).finally(() => {
        this.inFlight = null;
        if (this.queue.length > 0 || this.expiries.length > 0) this.schedule();
      });
    });
  }

  /**
   * Whether a group of the expirer's deletes alone may commit now; if some wait for the
   * time share, a timer schedules them (a writer's group may take them before).
   */
  private expiriesAloneNow(): boolean {
    if (this.expiries.length === 0) return false;
    const wait = this.expiryShareAt - performance.now();
    if (wait <= 0) return true;
    this.expiryTimer ??= setTimeout(() => {
      this.expiryTimer = null;
      this.schedule();
    }, Math.ceil(wait));
    return false;
  }

  /**
   * Moves into the group the expirer's deletes it may take (see the header); returns
   * the share of the group's ops that the time share is charged for (0: none).
   */
  private takeExpiries(group: Pending[]): number {
    if (this.expiries.length === 0) return 0;
    let ops = 0;
    let ttlWrites = 0;
    for (const pending of group) {
      for (const op of pending.request.ops) if (op.op === 'set' && op.ttlMs !== undefined) ttlWrites += 1;
      ops += pending.request.ops.length;
    }
    const paid = Math.min(this.expiries.length, EXPIRIES_PER_TTL_WRITE * ttlWrites);
    const shared = paid < this.expiries.length && performance.now() >= this.expiryShareAt ? Math.min(this.expiries.length - paid, EXPIRIES_PER_COMMIT) : 0;
    for (const pending of this.expiries.splice(0, paid + shared)) group.push(pending);
    return shared / (ops + paid + shared);
  }

  /** After a group whose deletes beyond its writers' TTLs were `share` of its ops, and which took `ms`. */
  private chargeExpiries(share: number, ms: number): void {
    this.expiryShareAt = performance.now() + share * ms * (1 / EXPIRY_TIME_SHARE - 1);
  }

  private async flush(applied: () => void): Promise<void> {
    const group = this.queue;
    this.queue = [];
    const share = this.takeExpiries(group);
    for (const pending of group) pending.committing = true;
    let results: WriteResult[];
    let head: number;
    const started = performance.now();
    try {
      // What the group cost writers: the time it held the next group back (the event loop's
      // on SQLite, the append's round trip on PostgreSQL).
      const onApplied = () => {
        if (share > 0) this.chargeExpiries(share, performance.now() - started);
        applied();
      };
      const committing = this.store.commit(
        group.map((pending) => pending.request),
        this.now(),
        onApplied,
      );
      // This group's head, before later groups commit while it waits for its fsync.
      head = this.store.position().head;
      if (this.store.appliesBeforeReturning) onApplied();
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
