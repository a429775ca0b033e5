// A snapshot on its own read-only connection, in the store's snapshot worker
// (snapshot-worker.ts): in WAL mode a read transaction is a true point-in-time view, so
// the writer keeps committing while pages are pulled.
import type { SnapshotReader, SnapshotShape, SnapshotText } from '../log-store.js';
import { prefixUpperBound } from './sql.js';
import type { SnapshotRequest } from './snapshot-thread.js';
import type { SnapshotMeta, SnapshotWorker, WorkerReply } from './snapshot-worker.js';

type Waiter = { resolve(reply: WorkerReply): void; reject(err: Error): void };

function failure(error: { message: string; code?: string }): Error {
  // The code (SQLITE_CORRUPT, SQLITE_BUSY...) is what the error handler and readiness go by.
  return Object.assign(new Error(error.message), error.code === undefined ? {} : { code: error.code });
}

export class SqliteSnapshot implements SnapshotReader {
  readonly offset: number;
  readonly epoch: string;
  readonly digest: bigint;
  private closed = false;
  /** The reply awaited (open and json: one at a time). */
  private waiter: Waiter | null = null;
  /** Text chunks made ahead, and the error that ended them, if any. */
  private readonly chunks: WorkerReply[] = [];
  private textShape: SnapshotShape | null = null;
  private textEnded = false;
  /** The chunk last returned: the worker's buffer, given back on the next call. */
  private spent: Uint8Array | null = null;

  /** Opens a snapshot at the head as the worker's new connection sees it. */
  static async open(worker: SnapshotWorker, prefix: string, onClose: (snapshot: SqliteSnapshot) => void = () => {}): Promise<SqliteSnapshot> {
    let snapshot: SqliteSnapshot | null = null;
    let pending: Waiter | null = null;
    const id = worker.register((reply) => {
      if (snapshot) snapshot.hear(reply);
      else if (pending) pending.resolve(reply);
    });
    try {
      const reply = await new Promise<WorkerReply>((resolve, reject) => {
        pending = { resolve, reject };
        worker.send({ id, op: 'open', prefix, upper: prefixUpperBound(prefix) });
      });
      if ('error' in reply) throw failure(reply.error);
      snapshot = new SqliteSnapshot(worker, id, (reply as { meta: SnapshotMeta }).meta, onClose);
      return snapshot;
    } catch (err) {
      worker.forget(id);
      throw err;
    }
  }

  private constructor(
    private readonly worker: SnapshotWorker,
    private readonly id: number,
    meta: SnapshotMeta,
    private readonly onClose: (snapshot: SqliteSnapshot) => void,
  ) {
    this.offset = meta.head;
    this.epoch = meta.epoch;
    this.digest = BigInt(`0x${meta.digest}`);
  }

  async nextJson(shape: SnapshotShape, max: number, maxChars?: number): Promise<string[]> {
    if (this.closed) throw new Error('the snapshot is closed');
    if (this.textShape !== null) throw new Error('the snapshot is being read as text');
    const reply = await this.request({ id: this.id, op: 'json', shape, max, maxChars });
    if ('error' in reply) throw failure(reply.error);
    return (reply as { lines: string[] }).lines;
  }

  async nextChunk(shape: SnapshotShape): Promise<SnapshotText> {
    if (this.closed) throw new Error('the snapshot is closed');
    if (this.textShape === null) {
      this.textShape = shape;
      this.worker.send({ id: this.id, op: 'text', shape });
    } else if (shape !== this.textShape) {
      throw new Error(`the snapshot is being read as ${this.textShape}s, not ${shape}s`);
    }
    if (this.spent) {
      const spent = this.spent;
      this.spent = null;
      if (!this.textEnded) this.worker.send({ id: this.id, op: 'text', shape, spent }, [spent.buffer as ArrayBuffer]);
    }
    if (this.chunks.length === 0 && this.textEnded) return { text: new Uint8Array(0), count: 0 };
    const reply = this.chunks.shift() ?? (await this.request(null));
    if (this.closed) throw new Error('the snapshot is closed');
    if ('error' in reply) throw failure(reply.error);
    const chunk = reply as { text: Uint8Array; length: number; count: number; last: boolean };
    this.spent = chunk.text;
    return { text: chunk.text.subarray(0, chunk.length), count: chunk.count };
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.worker.forget(this.id);
    this.waiter?.reject(new Error('the snapshot is closed'));
    this.waiter = null;
    this.onClose(this);
  }

  /** Sends `message` (none: waits for the next text chunk) and resolves with the reply. */
  private request(message: SnapshotRequest | null): Promise<WorkerReply> {
    return new Promise((resolve, reject) => {
      this.waiter = { resolve, reject };
      if (message) this.worker.send(message);
    });
  }

  private hear(reply: WorkerReply): void {
    if ('text' in reply && reply.last) this.textEnded = true;
    if ('error' in reply && this.textShape !== null) this.textEnded = true;
    const waiter = this.waiter;
    this.waiter = null;
    if (waiter) waiter.resolve(reply);
    else this.chunks.push(reply);
  }
}
