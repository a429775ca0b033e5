// PASSIVE WAL checkpoints in a worker thread: on the store's connection one would stall the event loop
// for as long as the disk takes; PASSIVE takes no write lock, so the store keeps committing.
import { createRequire } from 'node:module';
import type { Worker } from 'node:worker_threads';
import { checkpointThread, checkpointThreadUrl } from './checkpoint-thread.js';
import { startThread } from './thread.js';

export interface CheckpointResult {
  /** 1 when readers or a writer kept the checkpoint from finishing (it never waits). */
  busy: number;
  /** Frames in the WAL, and how many of them are in the database file now. */
  log: number;
  checkpointed: number;
}

const driver = createRequire(import.meta.url).resolve('better-sqlite3');

export class SqliteCheckpointer {
  private readonly worker: Worker;
  private readonly waiting = new Map<number, { resolve(result: CheckpointResult): void; reject(err: Error): void }>();
  private nextId = 0;
  private failure: Error | null = null;

  constructor(path: string) {
    this.worker = startThread(checkpointThreadUrl, checkpointThread, { workerData: { path, driver }, execArgv: [] });
    // Never what keeps the process alive; an abandoned run's worker ends with it.
    this.worker.unref();
    this.worker.on('message', (message: { id: number; result?: CheckpointResult; error?: string }) => {
      const waiter = this.waiting.get(message.id);
      this.waiting.delete(message.id);
      if (message.error !== undefined) waiter?.reject(new Error(`checkpoint failed: ${message.error}`));
      else waiter?.resolve(message.result!);
    });
    this.worker.on('error', (err) => this.fail(err));
    this.worker.on('exit', () => this.fail(new Error('the checkpoint worker exited')));
  }

  get usable(): boolean {
    return this.failure === null;
  }

  checkpoint(): Promise<CheckpointResult> {
    if (this.failure) return Promise.reject(this.failure);
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      this.worker.postMessage({ id });
    });
  }

  /** Closes the worker's connection and ends the thread (after a checkpoint in flight). */
  close(): void {
    if (!this.failure) this.worker.postMessage({ close: true });
    this.failure ??= new Error('the checkpointer is closed');
  }

  private fail(err: Error): void {
    this.failure ??= err;
    for (const waiter of this.waiting.values()) waiter.reject(err);
    this.waiting.clear();
  }
}
