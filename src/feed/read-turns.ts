// Reads of the change feed take turns with the rest of the server. A read of SQLite runs
// on the event loop; hundreds of readers woken together (or catching up from offset 0)
// would otherwise hold it for one read each before a plain GET got its turn. Queued reads
// run in slices of at most SLICE_MS between turns of the event loop, so a GET waits for
// one slice at most, however many readers there are.

/** The event loop's time given to feed reads in one go. */
const SLICE_MS = 4;

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

  /**
   * Runs `work` in its turn. Work started inside the slice counts against it: on SQLite a
   * read happens while `work()` is called. A reader that is `gone` by its turn is dropped
   * without reading.
   */
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
    do {
      const next = this.queue[this.head]!;
      this.head += 1;
      if (next.gone?.()) next.refuse(new ReaderGone());
      else next.start();
    } while (this.head < this.queue.length && performance.now() < until);
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
