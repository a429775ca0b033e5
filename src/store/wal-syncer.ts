// Durable commits without blocking the event loop. The database runs with
// synchronous = NORMAL, so a commit writes its WAL frames but does not fsync them; with
// STATELOG_SYNC=full the store then fdatasyncs the WAL file on libuv's thread pool, and
// answers a write, or shows a reader anything it wrote, only once that has returned.
// SQLite's recovery replays every WAL frame up to the last valid commit frame, so a
// commit whose frames are on disk survives a power loss just as with synchronous = FULL;
// the difference is that the event loop goes on parsing requests during the fsync
// (a quarter of its time under load, measured by bench/profile.ts).
//
// Up to MAX_IN_FLIGHT fsyncs run at once. A commit that lands while one runs starts its
// own at once instead of waiting for the running one to end: the device overlaps the
// flushes (bench/fsync.ts measures it), so a group waits about one fsync, not up to two.
// Each fsync covers every commit written before it started, whichever ends first; once
// MAX_IN_FLIGHT run, the commits that land meanwhile share the next one.
//
// A lone commit (a group of one request) has nothing to overlap its fsync with, so it
// fsyncs on the event loop at once, covering every commit so far, even while fsyncs
// started earlier still run on the pool. The hops to the thread pool and back cost more
// than the fsync itself on a busy machine: under the fan-out bench, fsyncs on the loop
// took 0.7 ms (p99 3.8) and those on the pool 1.9 ms (p99 23); a lone writer (bench
// write-c1) gets 1.6–2 × the PUTs a second this way, at half the p99. Under load the
// groups are larger and go to the thread pool; a blocked loop only makes the next group
// larger, and c = 10 and c = 50 measured the same either way.
import { fdatasyncSync } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';
import { dirname } from 'node:path';

export const MAX_IN_FLIGHT = 2;

/** How the WAL is made durable: the defaults are fdatasync, off and on the event loop. */
export interface Datasync {
  /** On the thread pool, while the event loop goes on. */
  inBackground(file: FileHandle): Promise<void>;
  /** On the event loop, for a lone commit. */
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
  /** Resolved, and replaced, whenever an fsync ends, well or not. */
  private anyEnded = signal();
  private file: Promise<FileHandle> | null = null;
  /** The WAL once open: a lone commit's fsync needs it at hand. */
  private openFile: FileHandle | null = null;
  /** After a failed fsync nothing can be promised any more (the kernel may have dropped the pages). */
  private failure: Error | null = null;

  constructor(
    private readonly walPath: string,
    /** The offset of the latest commit, read when an fsync starts: the fsync covers it. */
    private readonly head: () => number,
    /** How the open WAL is made durable (replaced in tests to hold an fsync or fail it). */
    private readonly datasync: Datasync = FDATASYNC,
  ) {}

  /**
   * Resolves once every commit up to `offset` is on disk; throws after a failed fsync.
   * `alone`: the commit is a group of one request: it is fsynced on the event loop
   * before this returns its promise.
   */
  async through(offset: number, alone = false): Promise<void> {
    // Nothing beyond the latest commit can be waited for.
    offset = Math.min(offset, this.head());
    if (alone && this.durable < offset && this.openFile && !this.failure) {
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

  /** Whether every commit up to `offset` is already on disk. */
  covers(offset: number): boolean {
    return this.durable >= offset;
  }

  /** Throws if an fsync has failed. */
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
      this.datasync.now(file.fd);
      this.durable = Math.max(this.durable, target);
    } catch (err) {
      this.fail(err);
    }
    // Commits waiting on an fsync still running on the pool may be covered now.
    this.wakeWaiters();
  }

  private wakeWaiters(): void {
    const ended = this.anyEnded;
    this.anyEnded = signal();
    ended.resolve();
  }

  private fail(err: unknown): void {
    this.failure ??= new Error(`fsync of the write-ahead log failed: ${(err as Error).message}`, { cause: err });
  }

  /**
   * Opens the WAL (it exists: the store has committed through it) and fsyncs its
   * directory once, so that the file's own entry is durable too.
   */
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
