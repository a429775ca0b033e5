// At most STATELOG_MAX_WATCHERS long polls and change streams wait at once: each holds
// a connection, a wake-up on every commit and a read of the log after it.
import { ApiError } from '../contract/errors.js';

/** Seconds a refused client is asked to wait before trying again. */
const RETRY_AFTER_SECONDS = 1;

export class WatcherSlots {
  private used = 0;

  constructor(readonly max: number) {}

  get inUse(): number {
    return this.used;
  }

  /** Takes a slot, or throws 429 when all are taken. The returned function gives it back (once). */
  acquire(): () => void {
    if (this.used >= this.max) {
      throw new ApiError(
        'too_many_requests',
        `${this.max} long polls and change streams are already open; retry in a moment`,
        { limit: this.max },
        { 'retry-after': String(RETRY_AFTER_SECONDS) },
      );
    }
    this.used += 1;
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      this.used -= 1;
    };
  }
}
