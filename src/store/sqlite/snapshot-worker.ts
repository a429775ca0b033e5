// The store's snapshots, read in a worker thread: each on a read-only connection of its
// own there. Stepping SQLite through a million keys is most of a snapshot's cost; on its
// own thread it runs beside the event loop, which meanwhile writes the spool and serves
// it (feed/snapshot-spool.ts), instead of taking turns with it.
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import { liveJsonSql, liveTextSql } from './sql.js';

/** Bytes of lines a text chunk holds at most (a line larger than that comes alone). */
const TEXT_CHUNK_BYTES = 1024 * 1024;
/** Text chunks a snapshot may have made ahead of its reader. */
const TEXT_CHUNKS_AHEAD = 3;
/**
 * Rows and characters read a page when making text: a page's joined text stays under
 * V8's 128 KiB large-object threshold, so it is allocated and freed young.
 */
const FILL_ROWS = 1000;
const FILL_CHARS = 64 * 1024;
/**
 * Rows of a page of text built whole by SQLite, and the largest value it takes: such a
 * page's text is small enough to be allocated and freed young. A page with a larger
 * value is read as lines (FILL_ROWS, FILL_CHARS).
 */
const TEXT_PAGE_ROWS = 768;
const TEXT_VALUE_BYTES = 4096;
const WORKER_YOUNG_MB = 2;

// Plain CommonJS, so that it runs the same under tsx and from dist/. Pages are the
// live-key queries of sql.ts (liveJsonSql, liveTextSql): after the first page, the next one starts at
// the last key read, excluded (liveEntriesParams does the same, as a page's last key
// always has the prefix).
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.driver);
const { sql, metaSql, chunkBytes, chunksAhead, fillRows, fillChars, textRows, textValueBytes } = workerData;
const snapshots = new Map();

function post(message, transfer) {
  parentPort.postMessage(message, transfer);
}

function statement(s, name, raw) {
  return (s.statements[name] ??= raw ? s.db.prepare(sql[name]).raw() : s.db.prepare(sql[name]).pluck());
}

function pageParams(s, limit, extra) {
  return { from: s.lastKey ?? s.prefix, upper: s.upper, exclude: s.lastKey, limit, now: 0, ...extra };
}

function page(s, shape, max, maxChars) {
  const rows = statement(s, shape, false).iterate(pageParams(s, max));
  const lines = [];
  let chars = 0;
  for (const line of rows) {
    lines.push(line);
    chars += line.length;
    if (chars >= maxChars) break;
  }
  if (lines.length > 0) s.lastKey = JSON.parse(lines[lines.length - 1]).key;
  return lines;
}

function end(s) {
  if (!s.db.open) return;
  if (s.db.inTransaction) s.db.exec('COMMIT');
  s.db.close();
}

// The next page of text and its count of lines; null at the end.
function textPage(s) {
  const [text, last, count, lines] = statement(s, 'text-' + s.shape, true).get(pageParams(s, textRows, { cap: textValueBytes }));
  if (count === 0) return null;
  if (lines === count) {
    s.lastKey = last;
    return { text, count };
  }
  const rows = page(s, s.shape, fillRows, fillChars);
  return { text: rows.join('\\n') + '\\n', count: rows.length };
}

// Fills the free buffers of a snapshot's text, one chunk each, and hands them over; the
// read transaction ends with the last chunk.
function pump(id, s) {
  while (s.free.length > 0 && !s.done) {
    let buffer = s.free.pop();
    let filled = 0;
    let count = 0;
    for (;;) {
      if (!s.carry) {
        s.carry = textPage(s);
        if (!s.carry) {
          s.done = true;
          end(s);
          break;
        }
      }
      const bytes = Buffer.byteLength(s.carry.text);
      if (filled + bytes > buffer.length) {
        if (filled > 0) break;
        // Larger than a chunk: it goes alone, in a buffer of its own.
        s.free.push(buffer);
        buffer = new Uint8Array(bytes);
      }
      filled += Buffer.from(buffer.buffer, buffer.byteOffset, buffer.length).write(s.carry.text, filled);
      count += s.carry.count;
      s.carry = null;
    }
    post({ id, text: buffer, length: filled, count, last: s.done }, [buffer.buffer]);
  }
}

function handle(message) {
  const { id } = message;
  if (message.op === 'open') {
    const db = new Database(workerData.path, { readonly: true, fileMustExist: true });
    try {
      db.pragma('busy_timeout = 5000');
      // The first read inside BEGIN fixes the view: meta and every later page see the
      // same committed state.
      db.exec('BEGIN');
      const meta = db.prepare(metaSql).get();
      snapshots.set(id, { db, prefix: message.prefix, upper: message.upper, lastKey: null, statements: {}, free: [], carry: null, done: false, ahead: null });
      post({ id, meta });
    } catch (err) {
      db.close();
      throw err;
    }
    return;
  }
  const s = snapshots.get(id);
  if (message.op === 'close') {
    if (s) end(s);
    snapshots.delete(id);
    return;
  }
  // A buffer given back after the last chunk was made has nothing left to hold.
  if (message.op === 'text' && s && s.done) return;
  if (!s || !s.db.open) throw new Error('the snapshot is closed');
  if (message.op === 'json') {
    const { shape, max } = message;
    const maxChars = message.maxChars ?? Infinity;
    const ahead = s.ahead;
    s.ahead = null;
    let lines;
    if (ahead && ahead.shape === shape && ahead.max === max && ahead.maxChars === maxChars) lines = ahead.lines;
    else {
      // A page read ahead for other limits is read again from where it began.
      if (ahead) s.lastKey = ahead.from;
      lines = page(s, shape, max, maxChars);
    }
    post({ id, lines });
    // The next page is read while the caller takes this one in, so that a reader of
    // pages (a rebuild of the state) finds it ready: one page more held, at most.
    if (lines.length > 0) {
      const from = s.lastKey;
      try {
        s.ahead = { shape, max, maxChars, from, lines: page(s, shape, max, maxChars) };
      } catch {
        // Read again, and its error answered, when the page is asked for.
        s.lastKey = from;
      }
    }
  } else if (message.op === 'text') {
    if (s.shape === undefined) {
      s.shape = message.shape;
      for (let i = 0; i < chunksAhead; i++) s.free.push(new Uint8Array(chunkBytes));
    }
    // A buffer given back is filled again; a larger one made for one line is let go.
    if (message.spent && message.spent.length === chunkBytes) s.free.push(message.spent);
    pump(id, s);
  }
}

parentPort.on('message', (message) => {
  if (message.op === 'exit') {
    for (const s of snapshots.values()) end(s);
    parentPort.close();
    return;
  }
  try {
    handle(message);
  } catch (err) {
    const s = snapshots.get(message.id);
    if (s) s.done = true;
    post({ id: message.id, error: { message: err instanceof Error ? err.message : String(err), code: err && err.code } });
  }
});
`;

const META_SQL = 'SELECT head, epoch, digest FROM meta WHERE id = 1';
const driver = createRequire(import.meta.url).resolve('better-sqlite3');

export interface SnapshotMeta {
  head: number;
  epoch: string;
  digest: string;
}

/** What the worker says of one snapshot. */
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
    this.worker = new Worker(WORKER_SOURCE, {
      eval: true,
      workerData: { path, driver, sql, metaSql: META_SQL, chunkBytes: TEXT_CHUNK_BYTES, chunksAhead: TEXT_CHUNKS_AHEAD, fillRows: FILL_ROWS, fillChars: FILL_CHARS, textRows: TEXT_PAGE_ROWS, textValueBytes: TEXT_VALUE_BYTES },
      execArgv: [],
      // Its garbage is pages of strings, dead once written into a buffer: a small young
      // generation collects them as well and keeps the thread's memory small.
      resourceLimits: { maxYoungGenerationSizeMb: WORKER_YOUNG_MB },
    });
    // Kept alive by the process only while a snapshot is open or the thread is closing:
    // idle, it is never what keeps the process running, and a wait on its reply is
    // never cut short by the process ending (a script has nothing else alive then).
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

  /** False once closed or failed: a new worker is needed then. */
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

  send(message: { id: number; op: string; [field: string]: unknown }, transfer: ArrayBuffer[] = []): void {
    if (this.failure) throw this.failure;
    this.worker.postMessage(message, transfer);
  }

  /**
   * Ends every snapshot's read transaction and the thread. Returns what to await for
   * that, or nothing when no snapshot was ever opened: then there is no transaction to
   * wait for, and the store closes without a turn of the event loop.
   */
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
