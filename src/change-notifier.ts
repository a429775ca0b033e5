// Wakes readers that wait for new records. It carries no records: a woken reader reads
// the log by offset, so a reader that falls behind simply reads more pages.
export class ChangeNotifier {
  private waiters = new Set<() => void>();
  private latest = 0;

  /** The highest head published so far. */
  get head(): number {
    return this.latest;
  }

  publish(head: number): void {
    if (head > this.latest) this.latest = head;
    const waiters = this.waiters;
    this.waiters = new Set();
    for (const wake of waiters) wake();
  }

  /**
   * Resolves true on the next publish after the call, or false when `timeoutMs`
   * passes or the signal aborts, whichever comes first.
   */
  next(timeoutMs: number, signal?: AbortSignal): Promise<boolean> {
    return new Promise((resolve) => {
      if (signal?.aborted) return resolve(false);
      const finish = (woken: boolean): void => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        this.waiters.delete(onPublish);
        resolve(woken);
      };
      const onPublish = (): void => finish(true);
      const onAbort = (): void => finish(false);
      const timer = setTimeout(finish, timeoutMs, false);
      this.waiters.add(onPublish);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  get waiting(): number {
    return this.waiters.size;
  }
}
