// The checkpointer's thread (checkpointer.ts starts it): PASSIVE checkpoints on a
// connection of its own. Everything it uses comes through `require` and workerData (thread.ts).
import type Database from 'better-sqlite3';
import type * as Threads from 'node:worker_threads';
import { runIfThread } from './thread.js';

export interface CheckpointThreadData {
  path: string;
  /** better-sqlite3, resolved by the store: a thread evaluated from text resolves nothing by itself. */
  driver: string;
}

export function checkpointThread(require: NodeJS.Require): void {
  const { parentPort, workerData } = require('node:worker_threads') as typeof Threads;
  const { path, driver } = workerData as CheckpointThreadData;
  const port = parentPort!;
  const Sqlite = require(driver) as typeof Database;
  const db = new Sqlite(path, { fileMustExist: true });
  // A PASSIVE checkpoint never waits for readers or writers anyway.
  db.pragma('busy_timeout = 0');
  port.on('message', (message: { id: number; close?: boolean }) => {
    if (message.close) {
      db.close();
      port.close();
      return;
    }
    try {
      const [result] = db.pragma('wal_checkpoint(PASSIVE)') as unknown[];
      port.postMessage({ id: message.id, result });
    } catch (err) {
      port.postMessage({ id: message.id, error: err instanceof Error ? err.message : String(err) });
    }
  });
}

/** Where the thread's module is, compiled or not. */
export const checkpointThreadUrl = new URL(import.meta.url);

runIfThread(checkpointThread, import.meta.url);
