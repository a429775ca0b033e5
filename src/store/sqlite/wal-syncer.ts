// Durable commits with STATELOG_SYNC=full: SQLite runs with synchronous = NORMAL and the WAL is
// fdatasynced here, on the event loop or the thread pool, wherever it costs least (docs/design.md).
import { fdatasyncSync } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';
import { dirname } from 'node:path';

export const MAX_IN_FLIGHT = 2;
/** The event loop's fsyncs may average this long (a fast disk) before groups go back to the pool. */
export const LOOP_FSYNC_MAX_MS = 2;
const LOOP_FSYNC_WEIGHT = 0.2;

/** Who waits: a commit of one request, of several, or a reader (always on the pool). */
export type Waiter = 'lone commit' | 'group commit' | 'reader';

/** How the WAL is made durable: the defaults are fdatasync, off and on the event loop. */
export interface Datasync {
  inBackground(file: FileHandle): Promise<void>;
  now(fd: number): void;
}

const FDATASYNC: Datasync = {
  inBackground: (file) => file.datasync(),
  now: (fd) => fdatasyncSync(fd),
};

interface Fsync {
  /** The latest commit when it started: it covers every one up to here. */
  target: number;
  /** Settles when it ends; a failure is kept in WalSyncer.failure. */
  ended: Promise<void>;
}

/** A promise and what resolves it: Promise.withResolvers() from Node 22. */
function signal(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((done) => (resolve = done));
  return { promise, resolve };
}

export class WalSyncer {
  /** Every commit up to this offset is on disk. */
  private durable = 0;
  private readonly running = new Set<Fsync>();
  private anyEnded = signal();
  private file: Promise<FileHandle> | null = null;
  /** The WAL once open: an fsync on the event loop needs it at hand. */
  private openFile: FileHandle | null = null;
  private loopFsyncMs = 0;
  /** After a failed fsync nothing can be promised any more (the kernel may have dropped the pages). */
  private failure: Error | null = null;

  constructor(
    private readonly walPath: string,
    /** The offset of the latest commit, read when an fsync starts: the fsync covers it. */
    private readonly head: () => number,
    /** How the open WAL is made durable (replaced in tests to hold an fsync or fail it). */
    private readonly datasync: Datasync = FDATASYNC,
    private readonly onFailure: (err: Error) => void = () => {},
  ) {}

  /** Resolves once every commit up to `offset` is on disk (a commit may fsync on the loop first); throws after a failure. */
  async through(offset: number, waiter: Waiter = 'reader'): Promise<void> {
    // Nothing beyond the latest commit can be waited for.
    offset = Math.min(offset, this.head());
    const onLoop = waiter === 'lone commit' || (waiter === 'group commit' && this.loopFsyncMs <= LOOP_FSYNC_MAX_MS);
    if (onLoop && this.durable < offset && this.openFile && !this.failure) {
      this.syncNow(this.openFile);
    }
    while (this.durable < offset) {
      if (this.failure) throw this.failure;
      // An fsync that started before `offset` committed does not cover it; one that
      // started later does, and may end before fsyncs that started earlier.
      const covered = [...this.running].some((fsync) => fsync.target >= offset);
      if (!covered && this.running.size < MAX_IN_FLIGHT) this.start();
      await this.anyEnded.promise;
    }
  }

  covers(offset: number): boolean {
    return this.durable >= offset;
  }

  check(): void {
    if (this.failure) throw this.failure;
  }

  async close(): Promise<void> {
    await Promise.all([...this.running].map((fsync) => fsync.ended));
    const file = await this.file?.catch(() => null);
    this.file = null;
    this.openFile = null;
    await file?.close();
  }

  private start(): void {
    const target = this.head();
    const fsync: Fsync = { target, ended: this.sync(target) };
    this.running.add(fsync);
    void fsync.ended.finally(() => {
      this.running.delete(fsync);
      this.wakeWaiters();
    });
  }

  /** One fsync on the thread pool; never rejects: a failure is kept for every waiter to throw. */
  private async sync(target: number): Promise<void> {
    try {
      const file = await (this.file ??= this.openWal());
      this.openFile = file;
      await this.datasync.inBackground(file);
      this.durable = Math.max(this.durable, target);
    } catch (err) {
      this.fail(err);
    }
  }

  /** One fsync on the event loop, covering every commit so far; a failure is kept as above. */
  private syncNow(file: FileHandle): void {
    const target = this.head();
    try {
      const started = performance.now();
      this.datasync.now(file.fd);
      this.loopFsyncMs += LOOP_FSYNC_WEIGHT * (performance.now() - started - this.loopFsyncMs);
      this.durable = Math.max(this.durable, target);
    } catch (err) {
      this.fail(err);
    }
    // Waiters on an fsync still running on the pool may be covered now.
    if (this.running.size > 0) this.wakeWaiters();
  }

  private wakeWaiters(): void {
    const ended = this.anyEnded;
    this.anyEnded = signal();
    ended.resolve();
  }

  private fail(err: unknown): void {
    if (this.failure) return;
    this.failure = new Error(`fsync of the write-ahead log failed: ${(err as Error).message}`, { cause: err });
    const failure = this.failure;
    queueMicrotask(() => this.onFailure(failure));
  }

  /** Opens the WAL and fsyncs its directory once, so that the file's own entry is durable too. */
  private async openWal(): Promise<FileHandle> {
    const file = await open(this.walPath, 'r');
    const dir = await open(dirname(this.walPath), 'r');
    try {
      await dir.sync();
    } finally {
      await dir.close();
    }
    return file;
  }
}
