// A snapshot read at the database's speed into a spool file, and served from the file at
// the reader's speed. The store's read transaction (which on SQLite keeps checkpoints
// from passing it, so the WAL grows, and on PostgreSQL holds back vacuum) lasts only as
// long as reading the database, whatever the client does. The file is unlinked as soon
// as it is made: the space is the kernel's to give back when the file is closed, even if
// the process is killed, and nothing is ever left to clean up at start-up.
//
// Once the answer has started, a reader that has taken everything in the file is handed
// the next chunks from memory (up to MEMORY_CHUNKS of them) instead: a client that keeps
// up costs no file write and read back. The file only ever follows what memory holds, so
// the reader takes memory first, then the file.
//
// The answer starts once the first START_BYTES are spooled (or all of it, if less), and
// the reader then follows the spooling; while older spools run, a spool answers only once
// it is whole (SpoolBudget gives room to the oldest first). A snapshot is refused with 503
// before any byte when the spool budget, the disk or the folder has no room for it before
// its answer starts; one that fails later (budget, disk, database, shutdown) is cut short
// without its last line, which is how every reader tells an incomplete snapshot.
import { randomUUID } from 'node:crypto';
import { open, unlink, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { StringDecoder } from 'node:string_decoder';
import { ApiError, databaseUnavailable } from '../contract/errors.js';
import type { SnapshotReader, SnapshotShape } from '../store/log-store.js';
import { SnapshotDigest } from './snapshot-digest.js';

/**
 * Rows and characters read from the store a page. A page becomes one string; kept well
 * under V8's 128 KiB large-object threshold it is allocated and freed in the young
 * generation, which measured faster and leaner than pages two to eight times larger.
 */
const FILL_ROWS = 1000;
const FILL_CHARS = 64 * 1024;
/**
 * Bytes gathered before a write to the spool: few large writes, each overlapping the
 * reading of the next pages (two buffers take turns).
 */
const WRITE_BYTES = 1024 * 1024;
/**
 * Bytes read back from the file at a time: the text of a read stays under V8's
 * large-object threshold, so it is freed young once the socket has it.
 */
const READ_BYTES = 64 * 1024;
/** Bytes spooled before the answer starts (see above). */
const START_BYTES = 4 * 1024 * 1024;
/** Chunks of up to WRITE_BYTES held in memory for a reader that keeps up (see above). */
const MEMORY_CHUNKS = 2;

/** A chunk held in memory, and how much of it the reader has taken. */
interface HeldChunk {
  bytes: Buffer;
  length: number;
  taken: number;
}

/** A spooled snapshot: its lines, or its text as it is (see nextText). */
export interface SpooledSnapshot extends SnapshotReader {
  /** The lines spooled; whole once nextText or nextJson has come to the end. */
  readonly count: number;
  /** The digest of the keys spooled (asked for with the `digest` option), 16 hex digits. */
  digestHex(): string;
  /**
   * The spooled text's next piece, of at most READ_BYTES bytes, cut anywhere (even inside
   * a line, or a character); null at the end. Waits for the spooling when it has caught up with it, and
   * throws if the spooling failed. Not to be mixed with nextJson on one snapshot.
   */
  nextText(): Promise<string | null>;
  /** Like nextText, as bytes read into `buffer`: how many, 0 at the end. */
  readInto(buffer: Buffer): Promise<number>;
}

export interface SpoolOptions {
  /** Shutdown: spooling stops with 503. */
  signal?: AbortSignal;
  /** Sum the digest of the spooled keys: `whole` when they are every live key. */
  digest?: { whole: boolean };
}

/** A spool as its budget sees it. */
interface BudgetHolder {
  /** Bytes it holds in the budget. */
  readonly heldBytes: number;
  /** Whether its answer has started (it can no longer be refused cleanly, only cut). */
  readonly answering: boolean;
  /** Stops it with `err`, giving back what it holds at once. */
  evict(err: ApiError): void;
}

/**
 * The bytes that all spools may take on disk together, given to the oldest first: a
 * spool that needs room takes it back from younger ones whose answer has not started
 * (they are refused with 503 before any byte), and a spool whose answer starts before
 * its spooling ends is the oldest one, so a snapshot within the budget always finishes.
 */
export class SpoolBudget {
  private used = 0;
  /** Spools holding bytes or still spooling, oldest first (a Set keeps insertion order). */
  private readonly holders = new Set<BudgetHolder>();
  /** The spool folder's fault (read-only, removed...), while it stands: readiness fails. */
  folderFault: string | null = null;

  constructor(readonly maxBytes: number) {}

  get usedBytes(): number {
    return this.used;
  }

  join(holder: BudgetHolder): void {
    this.holders.add(holder);
  }

  leave(holder: BudgetHolder): void {
    this.holders.delete(holder);
  }

  /** Whether no spool older than `holder` holds bytes or spools. */
  isOldest(holder: BudgetHolder): boolean {
    return this.holders.values().next().value === holder;
  }

  /** Takes `bytes` for `holder`, from younger spools not yet answering if need be; else throws 503. */
  take(bytes: number, holder: BudgetHolder): void {
    if (this.used + bytes > this.maxBytes) this.reclaim(bytes, holder);
    if (this.used + bytes > this.maxBytes) {
      throw databaseUnavailable(
        holder.heldBytes + bytes > this.maxBytes
          ? `the snapshot needs more spool space than STATELOG_SPOOL_MAX_BYTES allows (${this.maxBytes} bytes): raise it, or take the snapshot by prefix`
          : `other snapshots being served hold ${this.used - holder.heldBytes} of the ${this.maxBytes} bytes of spool space (STATELOG_SPOOL_MAX_BYTES); retry later`,
      );
    }
    this.used += bytes;
  }

  give(bytes: number): void {
    this.used -= bytes;
  }

  /** Refuses the youngest spools that have not answered yet, until `bytes` fit or none is left. */
  private reclaim(bytes: number, holder: BudgetHolder): void {
    const younger = [...this.holders];
    younger.splice(0, younger.indexOf(holder) + 1);
    for (const other of younger.reverse()) {
      if (this.used + bytes <= this.maxBytes) return;
      if (other.answering || other.heldBytes === 0) continue;
      other.evict(
        databaseUnavailable(`an older snapshot needs the spool space (STATELOG_SPOOL_MAX_BYTES, ${this.maxBytes} bytes); retry later`),
      );
    }
  }
}

function isNoSpace(err: unknown): boolean {
  const code = (err as { code?: unknown }).code;
  return code === 'ENOSPC' || code === 'EDQUOT' || code === 'EFBIG';
}

/** Errors of the spool folder itself (read-only, removed, not permitted): 503, and readiness fails. */
const FOLDER_FAULTS = new Set(['EROFS', 'ENOENT', 'ENOTDIR', 'EACCES', 'EPERM']);

function folderFault(err: unknown, dir: string): ApiError | null {
  const code = (err as { code?: unknown }).code;
  if (typeof code !== 'string' || !FOLDER_FAULTS.has(code)) return null;
  return databaseUnavailable(`cannot write snapshot spool files in ${dir} (${code}): check STATELOG_SPOOL_DIR`, { reason: 'spool' });
}

/**
 * Throws 503 while the spool folder's fault stands, which readiness asks once one was
 * seen: a spool file made and removed again clears it.
 */
export async function checkSpoolFolder(dir: string, budget: SpoolBudget): Promise<void> {
  if (budget.folderFault === null) return;
  const path = join(dir, `.statelog-spool-${randomUUID()}`);
  try {
    await (await open(path, 'w', 0o600)).close();
    await unlink(path);
    budget.folderFault = null;
  } catch (err) {
    throw folderFault(err, dir) ?? err;
  }
}

/**
 * Spools the whole of `reader` (its lines in `shape`) into a spool file in `dir` and
 * returns a reader of the copy once its first START_BYTES are written; the spooling goes
 * on behind it. Throws 503 `unavailable` when the budget or the disk has no room, or once
 * `signal` aborts (shutdown), before that; the store's reader is closed however this ends.
 */
export async function spoolSnapshot(
  reader: SnapshotReader,
  shape: SnapshotShape,
  dir: string,
  budget: SpoolBudget,
  options: SpoolOptions = {},
): Promise<SpooledSnapshot> {
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
  const spooled = new Spooled(reader, shape, file, budget, options);
  spooled.spool(path);
  try {
    await spooled.started;
  } catch (err) {
    spooled.close();
    throw err;
  }
  return spooled;
}

const noSpace = (): ApiError => databaseUnavailable('no disk space to spool the snapshot; retry later');

class Spooled implements SpooledSnapshot, BudgetHolder {
  readonly offset: number;
  readonly epoch: string;
  readonly digest: bigint;
  /** Resolves once the answer may start; rejects if the spooling failed before. */
  readonly started: Promise<void>;
  count = 0;
  /** Bytes in the file, and taken from the budget (a write in flight included). */
  private written = 0;
  private taken = 0;
  /** Whether the answer has started (`started` resolved). */
  answering = false;
  private done = false;
  private failure: { err: unknown } | null = null;
  /** Whether the spooling still runs (the file is closed only once it has stopped). */
  private spooling = true;
  private closed = false;
  /** The reader's wait for more to be spooled. */
  private waiting: (() => void) | null = null;
  private onStart!: { resolve(): void; reject(err: unknown): void };
  private readonly spooledDigest: SnapshotDigest | null;
  private position = 0;
  private pending = '';
  private start = 0;
  private readonly decoder = new StringDecoder('utf8');
  private buffer: Buffer | null = null;
  /** Chunks the reader takes before the file's unread bytes, and their spare buffers. */
  private held: HeldChunk[] = [];
  private spare: Buffer[] = [];
  private allocated = 0;

  constructor(
    private readonly reader: SnapshotReader,
    private readonly shape: SnapshotShape,
    private readonly file: FileHandle,
    private readonly budget: SpoolBudget,
    private readonly options: SpoolOptions,
  ) {
    this.offset = reader.offset;
    this.epoch = reader.epoch;
    this.digest = reader.digest;
    this.spooledDigest = options.digest ? new SnapshotDigest(reader, options.digest.whole) : null;
    this.started = new Promise((resolve, reject) => (this.onStart = { resolve, reject }));
    budget.join(this);
  }

  get heldBytes(): number {
    return this.taken;
  }

  evict(err: ApiError): void {
    this.failure ??= { err };
    this.budget.give(this.taken);
    this.taken = 0;
    this.moved();
  }

  digestHex(): string {
    if (!this.spooledDigest) throw new Error('the snapshot was spooled without its digest');
    return this.spooledDigest.hex();
  }

  /** Runs the spooling to its end (or failure, or close); `path` is unlinked first. */
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
        this.release();
      }
    })();
  }

  async nextText(): Promise<string | null> {
    // One buffer, read into again and again: the string owns its copy. Fresh buffers
    // would be external memory that, with little else allocated, waits long for a GC.
    this.buffer ??= Buffer.allocUnsafe(READ_BYTES);
    const bytes = await this.readInto(this.buffer);
    return bytes === 0 ? null : this.decoder.write(this.buffer.subarray(0, bytes));
  }

  async readInto(buffer: Buffer): Promise<number> {
    for (;;) {
      if (this.closed) throw new Error('the snapshot is closed');
      if (this.failure) throw this.failure.err;
      if (this.held.length > 0 || this.position < this.written) break;
      if (this.done) return 0;
      await new Promise<void>((resolve) => (this.waiting = resolve));
    }
    const chunk = this.held[0];
    if (chunk) {
      const bytes = chunk.bytes.copy(buffer, 0, chunk.taken, Math.min(chunk.length, chunk.taken + buffer.length));
      chunk.taken += bytes;
      if (chunk.taken === chunk.length) this.spare.push(this.held.shift()!.bytes);
      return bytes;
    }
    const { bytesRead } = await this.file.read(buffer, 0, Math.min(buffer.length, this.written - this.position), this.position);
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
    // The spooling stops at its next step; the file goes once it has.
    this.moved();
    this.release();
  }

  /** Text rendered by the store, written as it comes: the store makes the next meanwhile. */
  private async spoolChunks(next: (shape: SnapshotShape) => Promise<{ text: Uint8Array; count: number }>): Promise<void> {
    for (;;) {
      this.check();
      const { text, count } = await next(this.shape);
      if (count === 0) break;
      this.spooledDigest?.addText(text);
      // The text is the store's again at the next call: copied or written before that.
      await this.append(text);
      this.count += count;
    }
  }

  /** Lines gathered into large writes, each overlapping the reading of the next pages. */
  private async spoolLines(): Promise<void> {
    let buffer = Buffer.allocUnsafe(WRITE_BYTES);
    let spare = Buffer.allocUnsafe(WRITE_BYTES);
    let filled = 0;
    let writing: Promise<void> = Promise.resolve();
    const flush = async (): Promise<void> => {
      if (filled === 0) return;
      await writing;
      writing = this.append(buffer.subarray(0, filled));
      // Its failure is kept by the promise, awaited before the next write or at the end.
      writing.catch(() => {});
      [buffer, spare] = [spare, buffer];
      filled = 0;
    };
    try {
      for (;;) {
        this.check();
        const lines = await this.reader.nextJson(this.shape, FILL_ROWS, FILL_CHARS);
        if (lines.length === 0) break;
        this.count += lines.length;
        this.spooledDigest?.add(lines);
        const text = `${lines.join('\n')}\n`;
        const length = Buffer.byteLength(text);
        if (filled + length > buffer.length) await flush();
        if (length > buffer.length) {
          await writing;
          writing = this.append(Buffer.from(text));
          writing.catch(() => {});
        } else filled += buffer.write(text, filled);
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
    if (this.closed) throw new Error('the snapshot is closed');
    if (this.failure) throw this.failure.err;
    if (this.options.signal?.aborted) throw new ApiError('unavailable', 'the server is shutting down', {}, { 'retry-after': '1' });
  }

  /**
   * Hands `chunk` to a reader that keeps up, through memory, or else appends it to the
   * file. Both spoolers await each append before the next, so no write is under way here.
   */
  private async append(chunk: Uint8Array): Promise<void> {
    const keepsUp = this.answerMayStart() && this.position === this.written;
    const bytes = keepsUp && chunk.length <= WRITE_BYTES ? this.spareBuffer() : null;
    if (!bytes) return this.write(chunk);
    bytes.set(chunk);
    this.held.push({ bytes, length: chunk.length, taken: 0 });
    this.moved();
  }

  private spareBuffer(): Buffer | null {
    if (this.spare.length > 0) return this.spare.pop()!;
    if (this.allocated === MEMORY_CHUNKS) return null;
    this.allocated++;
    return Buffer.allocUnsafeSlow(WRITE_BYTES);
  }

  /** Appends `chunk` to the file, within the budget. */
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
    this.moved();
  }

  /** Wakes the reader waiting for the spool, and starts the answer once it may. */
  private moved(): void {
    if (this.failure) this.onStart.reject(this.failure.err);
    else if (this.answerMayStart()) {
      this.answering = true;
      this.onStart.resolve();
    }
    const waiting = this.waiting;
    this.waiting = null;
    waiting?.();
  }

  /**
   * Whether the answer may start (see above); chunks may be held in memory from then on.
   * Before its spooling ends, only the oldest spool starts: a younger one may yet be
   * refused to give it room, and is then refused before any byte.
   */
  private answerMayStart(): boolean {
    return this.answering || this.done || (this.written >= START_BYTES && this.budget.isOldest(this));
  }

  private release(): void {
    if (!this.closed || this.spooling) return;
    this.budget.give(this.taken);
    this.taken = 0;
    this.budget.leave(this);
    this.held = [];
    this.spare = [];
    // A read in flight fails on the closed handle; the stream is being torn down then.
    void this.file.close().catch(() => {});
  }
}
