// Wakes readers waiting for new records; a woken reader reads the log by offset, however far behind.
export class ChangeNotifier {
  private waiters = new Set<() => void>();
  private latest = 0;

  get head(): number {
    return this.latest;
  }

  publish(head: number): void {
    if (head > this.latest) this.latest = head;
    const waiters = this.waiters;
    this.waiters = new Set();
    for (const wake of waiters) wake();
  }

  /** The head went back (the database changed under the node): every waiter wakes and reads again. */
  rewind(head: number): void {
    this.latest = head;
    this.publish(head);
  }

  /** Adds a wake-up for the next publish only; `cancel` takes it back. */
  wakeOnce(wake: () => void): void {
    this.waiters.add(wake);
  }

  cancel(wake: () => void): void {
    this.waiters.delete(wake);
  }

  get waiting(): number {
    return this.waiters.size;
  }
}

/** The retry after a read that found nothing below the head (RepeatedWaiter.waitAfterEmptyRead). */
const EMPTY_READ_RETRY_MS = 250;

// A reader that waits for commits again and again (a stream, a long poll): it listens to its signal
// once and keeps its timer, which cost more than the rest of a delivery to a hundred streams each.
export class RepeatedWaiter {
  private resolveWait: ((woken: boolean) => void) | null = null;
  private timer: NodeJS.Timeout | undefined;
  private timerDeadline = -1;
  private readonly onPublish = (): void => this.settle(true);
  private readonly onAbort = (): void => this.settle(false);

  constructor(
    private readonly notifier: ChangeNotifier,
    private readonly signal: AbortSignal,
  ) {
    signal.addEventListener('abort', this.onAbort, { once: true });
  }

  /**
   * Waits after a read that found nothing below a head the node knows (the database lost those
   * commits in a failover): for the next publish, or a short retry at most, as reading again at
   * once would spin until a commit passes that head.
   */
  waitAfterEmptyRead(deadline: number): Promise<boolean> {
    return this.wait(Math.min(deadline, Date.now() + EMPTY_READ_RETRY_MS));
  }

  /** Resolves true on the next publish, or false at `deadline` (epoch ms) or when the signal aborts. */
  wait(deadline: number): Promise<boolean> {
    if (this.signal.aborted) return Promise.resolve(false);
    if (deadline !== this.timerDeadline) {
      clearTimeout(this.timer);
      this.timerDeadline = deadline;
      this.timer = setTimeout(() => {
        this.timerDeadline = -1;
        this.settle(false);
      }, deadline - Date.now());
    }
    return new Promise((resolve) => {
      this.resolveWait = resolve;
      this.notifier.wakeOnce(this.onPublish);
    });
  }

  /** Ends the wait under way as a publish would (the reader has something else to look at). */
  wake(): void {
    this.settle(true);
  }

  close(): void {
    clearTimeout(this.timer);
    this.signal.removeEventListener('abort', this.onAbort);
    this.settle(false);
  }

  private settle(woken: boolean): void {
    const resolve = this.resolveWait;
    if (!resolve) return;
    this.resolveWait = null;
    this.notifier.cancel(this.onPublish);
    resolve(woken);
  }
}
