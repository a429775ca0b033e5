// The store's snapshots, read in a worker thread, each on a read-only connection: stepping SQLite
// runs beside the event loop that writes and serves the spool, instead of taking turns with it.
import { createRequire } from 'node:module';
import type { Worker } from 'node:worker_threads';
import { snapshotThread, snapshotThreadUrl, type SnapshotRequest, type SnapshotThreadData } from './snapshot-thread.js';
import { liveJsonSql, liveTextSql } from './sql.js';
import { startThread } from './thread.js';

/** Bytes of lines a text chunk holds at most (a line larger than that comes alone). */
const TEXT_CHUNK_BYTES = 1024 * 1024;
/** Text chunks a snapshot may have made ahead of its reader. */
const TEXT_CHUNKS_AHEAD = 3;
/** Rows and characters a page of lines: its joined text stays under V8's large-object threshold, freed young. */
const FILL_ROWS = 1000;
const FILL_CHARS = 64 * 1024;
/** Rows of a page built whole by SQLite, and its largest value: a page with a larger one is read as lines. */
const TEXT_PAGE_ROWS = 768;
const TEXT_VALUE_BYTES = 4096;
const WORKER_YOUNG_MB = 2;

const META_SQL = 'SELECT head, epoch, digest FROM meta WHERE id = 1';
const driver = createRequire(import.meta.url).resolve('better-sqlite3');

export interface SnapshotMeta {
  head: number;
  epoch: string;
  digest: string;
}

export type WorkerReply =
  | { id: number; meta: SnapshotMeta }
  | { id: number; lines: string[] }
  | { id: number; text: Uint8Array; length: number; count: number; last: boolean }
  | { id: number; error: { message: string; code?: string } };

/** The worker thread of one store's snapshots; started with the first one, kept until closed. */
export class SnapshotWorker {
  private readonly worker: Worker;
  private readonly listeners = new Map<number, (reply: WorkerReply) => void>();
  private nextId = 0;
  private failure: Error | null = null;
  private readonly exited: Promise<void>;

  constructor(path: string) {
    const sql = {
      entry: liveJsonSql('entry'),
      record: liveJsonSql('record'),
      'text-entry': liveTextSql('entry'),
      'text-record': liveTextSql('record'),
    };
    const workerData: SnapshotThreadData = {
      path,
      driver,
      sql,
      metaSql: META_SQL,
      chunkBytes: TEXT_CHUNK_BYTES,
      chunksAhead: TEXT_CHUNKS_AHEAD,
      fillRows: FILL_ROWS,
      fillChars: FILL_CHARS,
      textRows: TEXT_PAGE_ROWS,
      textValueBytes: TEXT_VALUE_BYTES,
    };
    this.worker = startThread(snapshotThreadUrl, snapshotThread, {
      workerData,
      execArgv: [],
      // Its garbage is strings dead once in a buffer: a small young generation keeps the thread's memory small.
      resourceLimits: { maxYoungGenerationSizeMb: WORKER_YOUNG_MB },
    });
    // Kept alive by the process only while a snapshot is open or the thread closes: idle, it never
    // keeps the process running, and a wait on its reply is never cut short by the process ending.
    this.worker.unref();
    this.worker.on('message', (reply: WorkerReply) => this.listeners.get(reply.id)?.(reply));
    this.worker.on('error', (err) => this.fail(err));
    this.exited = new Promise((resolve) => {
      this.worker.on('exit', () => {
        this.fail(new Error('the snapshot worker exited'));
        resolve();
      });
    });
  }

  get usable(): boolean {
    return this.failure === null;
  }

  /** A new snapshot's id; `listener` hears every reply about it until `forget`. */
  register(listener: (reply: WorkerReply) => void): number {
    if (this.failure) throw this.failure;
    const id = this.nextId++;
    this.listeners.set(id, listener);
    if (this.listeners.size === 1) this.worker.ref();
    return id;
  }

  forget(id: number): void {
    if (!this.listeners.delete(id)) return;
    if (this.listeners.size === 0) this.worker.unref();
    if (!this.failure) this.worker.postMessage({ id, op: 'close' });
  }

  send(message: SnapshotRequest, transfer: ArrayBuffer[] = []): void {
    if (this.failure) throw this.failure;
    this.worker.postMessage(message, transfer);
  }

  /** Ends every snapshot's read transaction and the thread; nothing to await if no snapshot was ever opened. */
  close(): Promise<void> | undefined {
    if (!this.failure) {
      this.worker.ref();
      this.worker.postMessage({ op: 'exit' });
    }
    this.failure ??= new Error('the snapshot worker is closed');
    return this.nextId > 0 ? this.exited : undefined;
  }

  private fail(err: Error): void {
    this.failure ??= err;
    const listeners = [...this.listeners];
    this.listeners.clear();
    this.worker.unref();
    for (const [id, listener] of listeners) listener({ id, error: { message: err.message } });
  }
}
