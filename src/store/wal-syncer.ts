// Durable commits without blocking the event loop. The database runs with
// synchronous = NORMAL, so a commit writes its WAL frames but does not fsync them; with
// STATELOG_SYNC=full the store then fdatasyncs the WAL file on libuv's thread pool, and
// answers a write, or shows a reader anything it wrote, only once that has returned.
// SQLite's recovery replays every WAL frame up to the last valid commit frame, so a
// commit whose frames are on disk survives a power loss just as with synchronous = FULL;
// the difference is that the event loop goes on parsing requests during the fsync
// (a quarter of its time under load, measured by bench/profile.ts), and every commit
// that lands meanwhile shares the next fsync.
import { open, type FileHandle } from 'node:fs/promises';
import { dirname } from 'node:path';

export class WalSyncer {
  /** Every commit up to this offset is on disk. */
  private durable = 0;
  private running: Promise<void> | null = null;
  private file: Promise<FileHandle> | null = null;
  /** After a failed fsync nothing can be promised any more (the kernel may have dropped the pages). */
  private failure: Error | null = null;

  constructor(
    private readonly walPath: string,
    /** The offset of the latest commit, read when an fsync starts: the fsync covers it. */
    private readonly head: () => number,
    /** How the open WAL is made durable (replaced in tests to hold an fsync or fail it). */
    private readonly datasync: (file: FileHandle) => Promise<void> = (file) => file.datasync(),
  ) {}

  /** Resolves once every commit up to `offset` is on disk; throws after a failed fsync. */
  async through(offset: number): Promise<void> {
    // Nothing beyond the latest commit can be waited for.
    offset = Math.min(offset, this.head());
    while (this.durable < offset) {
      if (this.failure) throw this.failure;
      // An fsync that started before `offset` committed may not cover it: wait for it, then start another.
      this.running ??= this.syncOnce();
      await this.running;
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
    await this.running?.catch(() => {});
    const file = await this.file?.catch(() => null);
    this.file = null;
    await file?.close();
  }

  private async syncOnce(): Promise<void> {
    const target = this.head();
    try {
      const file = await (this.file ??= this.openWal());
      await this.datasync(file);
      this.durable = Math.max(this.durable, target);
    } catch (err) {
      this.failure = new Error(`fsync of the write-ahead log failed: ${(err as Error).message}`, { cause: err });
      throw this.failure;
    } finally {
      this.running = null;
    }
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
