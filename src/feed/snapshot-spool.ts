// A snapshot read at the database's speed into a spool file, then served from the file
// at the reader's speed. The store's read transaction (which on SQLite keeps checkpoints
// from passing it, so the WAL grows, and on PostgreSQL holds back vacuum) lasts only as
// long as reading the database, whatever the client does. The file is unlinked as soon
// as it is made: the space is the kernel's to give back when the file is closed, even if
// the process is killed, and nothing is ever left to clean up at start-up.
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

/** A spooled snapshot: its lines, or its text as it is (see nextText). */
export interface SpooledSnapshot extends SnapshotReader {
  /** The lines spooled. */
  readonly count: number;
  /** The digest of the keys spooled (asked for with the `digest` option), 16 hex digits. */
  digestHex(): string;
  /**
   * The spooled text's next piece, of at most READ_BYTES bytes, cut anywhere (even inside
   * a line); null at the end. Not to be mixed with nextJson on one snapshot.
   */
  nextText(): Promise<string | null>;
}

export interface SpoolOptions {
  /** Shutdown: spooling stops with 503. */
  signal?: AbortSignal;
  /** Sum the digest of the spooled keys: `whole` when they are every live key. */
  digest?: { whole: boolean };
}

/** The bytes that all spools may take on disk together. */
export class SpoolBudget {
  private used = 0;

  constructor(readonly maxBytes: number) {}

  get usedBytes(): number {
    return this.used;
  }

  take(bytes: number): boolean {
    if (this.used + bytes > this.maxBytes) return false;
    this.used += bytes;
    return true;
  }

  give(bytes: number): void {
    this.used -= bytes;
  }
}

function isNoSpace(err: unknown): boolean {
  const code = (err as { code?: unknown }).code;
  return code === 'ENOSPC' || code === 'EDQUOT' || code === 'EFBIG';
}

/**
 * Copies the whole of `reader` (its lines in `shape`) into a spool file in `dir`, closes
 * the reader, and returns a reader of the copy. Throws 503 `unavailable` when the budget
 * or the disk has no room, or once `signal` aborts (shutdown); the store's reader is
 * closed however this ends.
 */
export async function spoolSnapshot(
  reader: SnapshotReader,
  shape: SnapshotShape,
  dir: string,
  budget: SpoolBudget,
  options: SpoolOptions = {},
): Promise<SpooledSnapshot> {
  const { signal } = options;
  const path = join(dir, `.statelog-spool-${randomUUID()}`);
  let file: FileHandle | null = null;
  let bytes = 0;
  let count = 0;
  const digest = options.digest ? new SnapshotDigest(reader, options.digest.whole) : null;
  let buffer = Buffer.allocUnsafe(WRITE_BYTES);
  let spare = Buffer.allocUnsafe(WRITE_BYTES);
  let filled = 0;
  /** The write in flight, if any: awaited before its buffer is filled again. */
  let writing: Promise<void> | null = null;
  let failed: { err: unknown } | null = null;
  const written = async (): Promise<void> => {
    await writing;
    if (failed) throw failed.err;
  };
  const write = async (chunk: Buffer): Promise<void> => {
    if (!budget.take(chunk.length)) {
      throw databaseUnavailable(
        `snapshots being served already take the disk space they may (STATELOG_SPOOL_MAX_BYTES, ${budget.maxBytes} bytes); retry later`,
      );
    }
    const at = bytes;
    bytes += chunk.length;
    await written();
    // Its failure is kept at once, not left as a rejection nobody handles until awaited.
    writing = file!.write(chunk, 0, chunk.length, at).then(
      () => {},
      (err: unknown) => void (failed = { err }),
    );
  };
  const flush = async (): Promise<void> => {
    if (filled === 0) return;
    await write(buffer.subarray(0, filled));
    [buffer, spare] = [spare, buffer];
    filled = 0;
  };
  try {
    file = await open(path, 'w+', 0o600);
    await unlink(path);
    for (;;) {
      if (signal?.aborted) throw new ApiError('unavailable', 'the server is shutting down', {}, { 'retry-after': '1' });
      const lines = await reader.nextJson(shape, FILL_ROWS, FILL_CHARS);
      if (lines.length === 0) break;
      count += lines.length;
      digest?.add(lines);
      const text = `${lines.join('\n')}\n`;
      const length = Buffer.byteLength(text);
      if (filled + length > buffer.length) await flush();
      if (length > buffer.length) await write(Buffer.from(text));
      else filled += buffer.write(text, filled);
      // The store's reads are synchronous (SQLite): other requests get a turn between pages.
      await new Promise(setImmediate);
    }
    await flush();
    await written();
  } catch (err) {
    await writing;
    budget.give(bytes);
    await file?.close();
    throw isNoSpace(err) ? databaseUnavailable('no disk space to spool the snapshot; retry later') : err;
  } finally {
    reader.close();
  }
  return new Spooled(reader.offset, reader.epoch, reader.digest, shape, file!, bytes, count, digest, () => budget.give(bytes));
}

class Spooled implements SpooledSnapshot {
  private position = 0;
  private pending = '';
  private start = 0;
  private readonly decoder = new StringDecoder('utf8');
  private buffer: Buffer | null = null;
  private closed = false;

  constructor(
    readonly offset: number,
    readonly epoch: string,
    readonly digest: bigint,
    private readonly shape: SnapshotShape,
    private readonly file: FileHandle,
    private readonly size: number,
    readonly count: number,
    private readonly spooledDigest: SnapshotDigest | null,
    private readonly onClose: () => void,
  ) {}

  digestHex(): string {
    if (!this.spooledDigest) throw new Error('the snapshot was spooled without its digest');
    return this.spooledDigest.hex();
  }

  async nextText(): Promise<string | null> {
    if (this.closed) throw new Error('the snapshot is closed');
    if (this.position >= this.size) return null;
    // One buffer, read into again and again: the string owns its copy. Fresh buffers
    // would be external memory that, with little else allocated, waits long for a GC.
    this.buffer ??= Buffer.allocUnsafe(READ_BYTES);
    const { bytesRead } = await this.file.read(this.buffer, 0, Math.min(READ_BYTES, this.size - this.position), this.position);
    if (bytesRead === 0) throw new Error('the snapshot spool ended early');
    if (this.closed) throw new Error('the snapshot is closed');
    this.position += bytesRead;
    return this.decoder.write(this.buffer.subarray(0, bytesRead));
  }

  async nextJson(shape: SnapshotShape, max: number, maxChars = Number.POSITIVE_INFINITY): Promise<string[]> {
    if (this.closed) throw new Error('the snapshot is closed');
    if (shape !== this.shape) throw new Error(`the snapshot was spooled as ${this.shape}s, not ${shape}s`);
    const lines: string[] = [];
    let chars = 0;
    while (lines.length < max && (lines.length === 0 || chars < maxChars)) {
      const end = this.pending.indexOf('\n', this.start);
      if (end < 0) {
        if (this.position >= this.size) break;
        await this.fill();
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
    this.onClose();
    // A read in flight fails on the closed handle; the stream is being torn down then.
    void this.file.close().catch(() => {});
  }

  private async fill(): Promise<void> {
    const text = await this.nextText();
    this.pending = this.pending.slice(this.start) + (text ?? '');
    this.start = 0;
  }
}
