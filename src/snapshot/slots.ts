// A fixed number of slots for answers that hold resources while they last (snapshots,
// long polls, streams): one more is refused with 429 and Retry-After.
import { ApiError } from '../contract/errors.js';

/** Seconds a refused client is asked to wait; a slot is usually freed within seconds. */
const RETRY_AFTER_SECONDS = 1;

export class Slots {
  private used = 0;

  constructor(
    readonly max: number,
    /** What is already open when all slots are taken, for the 429's message. */
    private readonly busy: string,
  ) {}

  get inUse(): number {
    return this.used;
  }

  /** Takes a slot, or throws 429 when all are taken. The returned function gives it back (once). */
  acquire(): () => void {
    if (this.used >= this.max) {
      throw new ApiError(
        'too_many_requests',
        `${this.max} ${this.busy}; retry in a moment`,
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
