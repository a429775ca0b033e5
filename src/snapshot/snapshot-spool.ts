// A snapshot read at the database's speed into an unlinked spool file and served from it
// at each reader's speed, so that the store's read transaction never waits for a client
// (docs/design.md, "Snapshots and slow readers"). A failure after readers start cuts it short.
import { randomUUID } from 'node:crypto';
import { open, unlink, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { StringDecoder } from 'node:string_decoder';
import { ApiError, databaseUnavailable } from '../contract/errors.js';
import type { SnapshotReader, SnapshotShape } from '../store/log-store.js';
import { SnapshotDigest } from './snapshot-digest.js';
import { folderFault, isNoSpace, START_BYTES, WRITE_BYTES, type BudgetHolder, type SpoolBudget } from './spool-budget.js';

/** Rows and characters a page: one string under V8's large-object threshold is freed young (measured faster). */
const FILL_ROWS = 1000;
const FILL_CHARS = 64 * 1024;
/** Bytes read back at a time: under the large-object threshold, so freed young once the socket has them. */
const READ_BYTES = 64 * 1024;

/** A spooled snapshot: its lines, or its text as it is (see nextText). */
export interface SpooledSnapshot extends SnapshotReader {
  /** The lines spooled; whole once nextText or nextJson has come to the end. */
  readonly count: number;
  digestHex(): string;
  /** The text's next piece (at most READ_BYTES, cut anywhere), null at the end; throws if the spooling failed. */
  nextText(): Promise<string | null>;
  /** Like nextText, as bytes read into `buffer`: how many, 0 at the end. */
  readInto(buffer: Buffer): Promise<number>;
}

export interface SpoolOptions {
  signal?: AbortSignal;
  /** Sum the digest of the spooled keys: `whole` when they are every live key. */
  digest?: { whole: boolean };
}

/** Spools `reader` into `dir`; returns once START_BYTES are written (503 before if no room or shutdown), with one hold. */
export async function openSpool(
  reader: SnapshotReader,
  shape: SnapshotShape,
  dir: string,
  budget: SpoolBudget,
  options: SpoolOptions = {},
): Promise<{ spool: Spool; release: () => void }> {
  const path = join(dir, `.statelog-spool-${randomUUID()}`);
  let file: FileHandle;
  try {
    file = await open(path, 'w+', 0o600);
    budget.folderFault = null;
  } catch (err) {
    reader.close();
    const fault = folderFault(err, dir);
    if (fault) budget.folderFault = fault.message;
    throw isNoSpace(err) ? noSpace() : (fault ?? err);
  }
  const spool = new Spool(reader, shape, file, budget, options);
  const release = spool.hold();
  spool.spool(path);
  try {
    await spool.started;
  } catch (err) {
    release();
    throw err;
  }
  return { spool, release };
}

/** A spool with one reader, which gives it back when it closes. */
export async function spoolSnapshot(
  reader: SnapshotReader,
  shape: SnapshotShape,
  dir: string,
  budget: SpoolBudget,
  options: SpoolOptions = {},
): Promise<SpooledSnapshot> {
  const { spool, release } = await openSpool(reader, shape, dir, budget, options);
  const attached = spool.attach();
  release();
  return attached;
}

const noSpace = (): ApiError => databaseUnavailable('no disk space to spool the snapshot; retry later');

export class Spool implements BudgetHolder {
  readonly offset: number;
  readonly epoch: string;
  readonly lineage: string | undefined;
  readonly digest: bigint;
  /** Resolves once readers may start; rejects if the spooling failed before. */
  readonly started: Promise<void>;
  readonly stopped: Promise<void>;
  count = 0;
  /** Bytes in the file, and taken from the budget (a write in flight included). */
  written = 0;
  private taken = 0;
  done = false;
  failure: { err: unknown } | null = null;
  /** Whether the spooling still runs (the file is closed only once it has stopped). */
  private spooling = true;
  /** Readers attached and holds taken: the spool goes when both are none. */
  private users = 0;
  private readers = 0;
  /** Whether readers may start (`started` resolved): it can no longer be refused cleanly, only cut. */
  answering = false;
  private gone = false;
  /** Settled at the next step of the spooling: readers that caught up wait for it. */
  private step = deferred();
  private onStart = deferred();
  private onStop = deferred();
  private readonly spooledDigest: SnapshotDigest | null;

  constructor(
    private readonly reader: SnapshotReader,
    private readonly shape: SnapshotShape,
    readonly file: FileHandle,
    private readonly budget: SpoolBudget,
    private readonly options: SpoolOptions,
  ) {
    this.offset = reader.offset;
    this.epoch = reader.epoch;
    this.lineage = reader.lineage;
    this.digest = reader.digest;
    this.spooledDigest = options.digest ? new SnapshotDigest(reader, options.digest.whole) : null;
    this.started = this.onStart.promise;
    this.stopped = this.onStop.promise;
    // Whoever awaits them sees the failure; unawaited, it is not an unhandled rejection.
    this.started.catch(() => {});
    budget.join(this);
  }

  get heldBytes(): number {
    return this.taken;
  }

  /** Kept whole for requests to come, with no reader now: its room may be taken back. */
  get idle(): boolean {
    return this.done && this.readers === 0;
  }

  evict(err: ApiError): void {
    this.failure ??= { err };
    this.budget.give(this.taken);
    this.taken = 0;
    this.moved();
  }

  get usable(): boolean {
    return !this.gone && this.failure === null;
  }

  digestHex(): string {
    if (!this.spooledDigest) throw new Error('the snapshot was spooled without its digest');
    return this.spooledDigest.hex();
  }

  attach(): SpooledSnapshot {
    if (!this.usable) throw new Error('the spool is gone');
    this.users++;
    this.readers++;
    return new SpoolReader(this, this.shape);
  }

  /** Keeps the spool without a reader; the returned function lets it go (once). */
  hold(): () => void {
    if (this.gone) throw new Error('the spool is gone');
    this.users++;
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      this.leave();
    };
  }

  detach(): void {
    this.readers--;
    this.leave();
  }

  /** A reader or a hold lets go: the last one stops the spooling and frees the file. */
  private leave(): void {
    this.users--;
    if (this.users > 0) return;
    this.gone = true;
    // The spooling stops at its next step; the file goes once it has.
    this.moved();
    this.release();
  }

  nextStep(): Promise<void> {
    return this.step.promise;
  }

  spool(path: string): void {
    void (async () => {
      try {
        await unlink(path);
        if (this.reader.nextChunk) await this.spoolChunks(this.reader.nextChunk.bind(this.reader));
        else await this.spoolLines();
        this.done = true;
      } catch (err) {
        this.failure = { err: isNoSpace(err) ? noSpace() : err };
      } finally {
        this.reader.close();
        this.spooling = false;
        this.moved();
        this.onStop.resolve();
        this.release();
      }
    })();
  }

  /** Text rendered by the store, written as it comes: the store makes the next meanwhile. */
  private async spoolChunks(next: (shape: SnapshotShape) => Promise<{ text: Uint8Array; count: number }>): Promise<void> {
    for (;;) {
      this.check();
      const { text, count } = await next(this.shape);
      if (count === 0) break;
      this.spooledDigest?.addText(text);
      // The text is the store's again at the next call: written before that.
      await this.write(text);
      this.count += count;
      this.moved();
    }
  }

  private async spoolLines(): Promise<void> {
    let buffer = Buffer.allocUnsafe(WRITE_BYTES);
    let spare = Buffer.allocUnsafe(WRITE_BYTES);
    let filled = 0;
    let lines = 0;
    let writing: Promise<void> = Promise.resolve();
    // The count moves with the bytes a reader can read, never ahead of them.
    const write = (bytes: Uint8Array, count: number): void => {
      writing = writing.then(async () => {
        await this.write(bytes);
        this.count += count;
        this.moved();
      });
      // Its failure is kept by the promise, awaited before the next write or at the end.
      writing.catch(() => {});
    };
    const flush = async (): Promise<void> => {
      if (filled === 0) return;
      await writing;
      write(buffer.subarray(0, filled), lines);
      [buffer, spare] = [spare, buffer];
      filled = 0;
      lines = 0;
    };
    try {
      for (;;) {
        this.check();
        const page = await this.reader.nextJson(this.shape, FILL_ROWS, FILL_CHARS);
        if (page.length === 0) break;
        this.spooledDigest?.add(page);
        const text = `${page.join('\n')}\n`;
        const length = Buffer.byteLength(text);
        if (filled + length > buffer.length) await flush();
        if (length > buffer.length) {
          await writing;
          write(Buffer.from(text), page.length);
        } else {
          filled += buffer.write(text, filled);
          lines += page.length;
        }
        // The store's reads may be synchronous (SQLite): other requests get a turn between pages.
        await new Promise(setImmediate);
      }
      await flush();
    } finally {
      await writing.catch(() => {});
    }
    await writing;
  }

  private check(): void {
    if (this.gone) throw new Error('the snapshot is closed');
    if (this.failure) throw this.failure.err;
    if (this.options.signal?.aborted) throw new ApiError('unavailable', 'the server is shutting down', {}, { 'retry-after': '1' });
  }

  private async write(chunk: Uint8Array): Promise<void> {
    // Refused meanwhile to make room for an older spool: take nothing more.
    if (this.failure) throw this.failure.err;
    this.budget.take(chunk.length, this);
    this.taken += chunk.length;
    let at = 0;
    while (at < chunk.length) {
      const { bytesWritten } = await this.file.write(chunk, at, chunk.length - at, this.written + at);
      at += bytesWritten;
    }
    this.written += chunk.length;
  }

  private moved(): void {
    if (this.failure) this.onStart.reject(this.failure.err);
    else if (this.mayStart()) {
      this.answering = true;
      this.onStart.resolve();
    }
    const step = this.step;
    this.step = deferred();
    step.resolve();
  }

  /** Before its spooling ends only the oldest spool starts: a younger one may yet be refused, before any byte, to give it room. */
  private mayStart(): boolean {
    return this.answering || this.done || (this.written >= START_BYTES && this.budget.isOldest(this));
  }

  private release(): void {
    if (!this.gone || this.spooling) return;
    this.budget.give(this.taken);
    this.taken = 0;
    this.budget.leave(this);
    // A read in flight fails on the closed handle; its stream is being torn down then.
    void this.file.close().catch(() => {});
  }
}

interface Deferred {
  promise: Promise<void>;
  resolve(): void;
  reject(err: unknown): void;
}

function deferred(): Deferred {
  let resolve!: () => void;
  let reject!: (err: unknown) => void;
  const promise = new Promise<void>((res, rej) => ((resolve = res), (reject = rej)));
  return { promise, resolve, reject };
}

class SpoolReader implements SpooledSnapshot {
  readonly offset: number;
  readonly epoch: string;
  readonly lineage: string | undefined;
  readonly digest: bigint;
  private position = 0;
  private closed = false;
  private pending = '';
  private start = 0;
  private readonly decoder = new StringDecoder('utf8');
  private buffer: Buffer | null = null;

  constructor(
    private readonly spool: Spool,
    private readonly shape: SnapshotShape,
  ) {
    this.offset = spool.offset;
    this.epoch = spool.epoch;
    this.lineage = spool.lineage;
    this.digest = spool.digest;
  }

  get count(): number {
    return this.spool.count;
  }

  digestHex(): string {
    return this.spool.digestHex();
  }

  async nextText(): Promise<string | null> {
    // One buffer, read into again and again: the string owns its copy. Fresh buffers
    // would be external memory that, with little else allocated, waits long for a GC.
    this.buffer ??= Buffer.allocUnsafe(READ_BYTES);
    const bytes = await this.readInto(this.buffer);
    return bytes === 0 ? null : this.decoder.write(this.buffer.subarray(0, bytes));
  }

  async readInto(buffer: Buffer): Promise<number> {
    const spool = this.spool;
    for (;;) {
      if (this.closed) throw new Error('the snapshot is closed');
      if (spool.failure) throw spool.failure.err;
      if (this.position < spool.written) break;
      if (spool.done) return 0;
      await spool.nextStep();
    }
    const { bytesRead } = await spool.file.read(buffer, 0, Math.min(buffer.length, spool.written - this.position), this.position);
    if (bytesRead === 0) throw new Error('the snapshot spool ended early');
    if (this.closed) throw new Error('the snapshot is closed');
    this.position += bytesRead;
    return bytesRead;
  }

  async nextJson(shape: SnapshotShape, max: number, maxChars = Number.POSITIVE_INFINITY): Promise<string[]> {
    if (this.closed) throw new Error('the snapshot is closed');
    if (shape !== this.shape) throw new Error(`the snapshot was spooled as ${this.shape}s, not ${shape}s`);
    const lines: string[] = [];
    let chars = 0;
    while (lines.length < max && (lines.length === 0 || chars < maxChars)) {
      const end = this.pending.indexOf('\n', this.start);
      if (end < 0) {
        const text = await this.nextText();
        if (text === null) break;
        this.pending = this.pending.slice(this.start) + text;
        this.start = 0;
        continue;
      }
      const line = this.pending.slice(this.start, end);
      this.start = end + 1;
      lines.push(line);
      chars += line.length;
    }
    return lines;
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.spool.detach();
  }
}
