// Reads of the change feed take turns with the rest of the server: queued reads run in slices of at most
// SLICE_MS between turns of the event loop, so a GET waits one slice at most, however many readers.

/** The event loop's time given to feed reads in one go. */
const SLICE_MS = 4;
/**
 * Reads started in one go, however cheap: each read's answer (its rendering and reply) runs after the
 * slice, outside its clock, and a read from memory takes microseconds, so time alone would start hundreds.
 */
const SLICE_READS = 16;

/** A reader that went away before its turn: it is not read for (answered 503 if anyone is left to answer). */
export class ReaderGone extends Error {
  constructor() {
    super('the client went away');
    this.name = 'ReaderGone';
  }
}

interface Queued {
  start: () => void;
  gone: (() => boolean) | undefined;
  refuse: (err: Error) => void;
}

export class ReadTurns {
  private readonly queue: Queued[] = [];
  private head = 0;
  private scheduled = false;

  /** Runs `work` in its turn (a read happens while it is called); a reader `gone` by then is dropped unread. */
  run<T>(work: () => Promise<T>, gone?: () => boolean): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const start = (): void => {
        try {
          work().then(resolve, reject);
        } catch (err) {
          reject(err as Error);
        }
      };
      this.queue.push({ start, gone, refuse: reject });
      if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(this.slice);
      }
    });
  }

  get waiting(): number {
    return this.queue.length - this.head;
  }

  private readonly slice = (): void => {
    const until = performance.now() + SLICE_MS;
    let started = 0;
    do {
      const next = this.queue[this.head]!;
      this.head += 1;
      if (next.gone?.()) next.refuse(new ReaderGone());
      else {
        next.start();
        started += 1;
      }
    } while (this.head < this.queue.length && started < SLICE_READS && performance.now() < until);
    if (this.head >= this.queue.length) {
      this.queue.length = 0;
      this.head = 0;
      this.scheduled = false;
    } else {
      if (this.head > 1024) {
        this.queue.splice(0, this.head);
        this.head = 0;
      }
      setImmediate(this.slice);
    }
  };
}
