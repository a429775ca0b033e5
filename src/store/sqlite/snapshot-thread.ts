// The snapshot worker's thread: each snapshot a read-only connection in a read transaction, paged by
// sql.ts's live-key queries from the last key read; everything comes through `require` and workerData.
import type Database from 'better-sqlite3';
import type * as Threads from 'node:worker_threads';
import { runIfThread } from './thread.js';

export interface SnapshotThreadData {
  path: string;
  /** better-sqlite3, resolved by the store: a thread evaluated from text resolves nothing by itself. */
  driver: string;
  sql: Record<'entry' | 'record' | 'text-entry' | 'text-record', string>;
  metaSql: string;
  chunkBytes: number;
  chunksAhead: number;
  fillRows: number;
  fillChars: number;
  textRows: number;
  textValueBytes: number;
}

export type SnapshotRequest =
  /** `upper`: the prefix's exclusive upper bound, as bytes (sql.ts prefixUpperBound). */
  | { op: 'open'; id: number; prefix: string; upper: Uint8Array }
  | { op: 'json'; id: number; shape: 'entry' | 'record'; max: number; maxChars?: number }
  | { op: 'text'; id: number; shape: 'entry' | 'record'; spent?: Uint8Array }
  | { op: 'close'; id: number }
  | { op: 'exit' };

export function snapshotThread(require: NodeJS.Require): void {
  type Shape = 'entry' | 'record';
  interface Snapshot {
    db: Database.Database;
    prefix: string;
    upper: Uint8Array;
    lastKey: string | null;
    statements: Partial<Record<string, Database.Statement>>;
    free: Uint8Array[];
    carry: { text: string; count: number } | null;
    done: boolean;
    shape?: Shape;
    ahead: { shape: Shape; max: number; maxChars: number; from: string | null; lines: string[] } | null;
  }

  const { parentPort, workerData } = require('node:worker_threads') as typeof Threads;
  const data = workerData as SnapshotThreadData;
  const port = parentPort!;
  const Sqlite = require(data.driver) as typeof Database;
  const snapshots = new Map<number, Snapshot>();

  const post = (message: object, transfer: ArrayBuffer[] = []): void => port.postMessage(message, transfer);

  function statement(s: Snapshot, name: keyof SnapshotThreadData['sql'], raw: boolean): Database.Statement {
    return (s.statements[name] ??= raw ? s.db.prepare(data.sql[name]).raw() : s.db.prepare(data.sql[name]).pluck());
  }

  function pageParams(s: Snapshot, limit: number, extra: object = {}): object {
    return { from: s.lastKey ?? s.prefix, upper: s.upper, exclude: s.lastKey, limit, now: 0, ...extra };
  }

  function page(s: Snapshot, shape: Shape, max: number, maxChars: number): string[] {
    const rows = statement(s, shape, false).iterate(pageParams(s, max)) as IterableIterator<string>;
    const lines: string[] = [];
    let chars = 0;
    for (const line of rows) {
      lines.push(line);
      chars += line.length;
      if (chars >= maxChars) break;
    }
    if (lines.length > 0) s.lastKey = (JSON.parse(lines[lines.length - 1]!) as { key: string }).key;
    return lines;
  }

  function end(s: Snapshot): void {
    if (!s.db.open) return;
    if (s.db.inTransaction) s.db.exec('COMMIT');
    s.db.close();
  }

  function textPage(s: Snapshot): { text: string; count: number } | null {
    const params = pageParams(s, data.textRows, { cap: data.textValueBytes });
    const [text, last, count, lines] = statement(s, `text-${s.shape!}` as const, true).get(params) as [string, string, number, number];
    if (count === 0) return null;
    if (lines === count) {
      s.lastKey = last;
      return { text, count };
    }
    const rows = page(s, s.shape!, data.fillRows, data.fillChars);
    return { text: rows.join('\n') + '\n', count: rows.length };
  }

  /** Fills the free buffers of a snapshot's text, one chunk each, and hands them over; the read transaction ends with the last chunk. */
  function pump(id: number, s: Snapshot): void {
    while (s.free.length > 0 && !s.done) {
      let buffer = s.free.pop()!;
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
      post({ id, text: buffer, length: filled, count, last: s.done }, [buffer.buffer as ArrayBuffer]);
    }
  }

  function open(message: Extract<SnapshotRequest, { op: 'open' }>): void {
    const db = new Sqlite(data.path, { readonly: true, fileMustExist: true });
    try {
      db.pragma('busy_timeout = 5000');
      // The first read inside BEGIN fixes the view: meta and every later page see the same committed state.
      db.exec('BEGIN');
      const meta = db.prepare(data.metaSql).get();
      snapshots.set(message.id, { db, prefix: message.prefix, upper: message.upper, lastKey: null, statements: {}, free: [], carry: null, done: false, ahead: null });
      post({ id: message.id, meta });
    } catch (err) {
      db.close();
      throw err;
    }
  }

  function json(s: Snapshot, { id, shape, max, maxChars = Infinity }: Extract<SnapshotRequest, { op: 'json' }>): void {
    const ahead = s.ahead;
    s.ahead = null;
    let lines: string[];
    if (ahead && ahead.shape === shape && ahead.max === max && ahead.maxChars === maxChars) lines = ahead.lines;
    else {
      // A page read ahead for other limits is read again from where it began.
      if (ahead) s.lastKey = ahead.from;
      lines = page(s, shape, max, maxChars);
    }
    post({ id, lines });
    // The next page is read while the caller takes this one in: one page more held, at most.
    if (lines.length > 0) {
      const from = s.lastKey;
      try {
        s.ahead = { shape, max, maxChars, from, lines: page(s, shape, max, maxChars) };
      } catch {
        // Read again, and its error answered, when the page is asked for.
        s.lastKey = from;
      }
    }
  }

  function handle(message: Exclude<SnapshotRequest, { op: 'exit' }>): void {
    if (message.op === 'open') return open(message);
    const s = snapshots.get(message.id);
    if (message.op === 'close') {
      if (s) end(s);
      snapshots.delete(message.id);
      return;
    }
    // A buffer given back after the last chunk was made has nothing left to hold.
    if (message.op === 'text' && s && s.done) return;
    if (!s || !s.db.open) throw new Error('the snapshot is closed');
    if (message.op === 'json') return json(s, message);
    if (s.shape === undefined) {
      s.shape = message.shape;
      for (let i = 0; i < data.chunksAhead; i++) s.free.push(new Uint8Array(data.chunkBytes));
    }
    // A buffer given back is filled again; a larger one made for one line is let go.
    if (message.spent && message.spent.length === data.chunkBytes) s.free.push(message.spent);
    pump(message.id, s);
  }

  port.on('message', (message: SnapshotRequest) => {
    if (message.op === 'exit') {
      for (const s of snapshots.values()) end(s);
      port.close();
      return;
    }
    try {
      handle(message);
    } catch (err) {
      const s = snapshots.get(message.id);
      if (s) s.done = true;
      post({ id: message.id, error: { message: err instanceof Error ? err.message : String(err), code: (err as { code?: unknown } | null)?.code } });
    }
  });
}

/** Where the thread's module is, compiled or not. */
export const snapshotThreadUrl = new URL(import.meta.url);

runIfThread(snapshotThread, import.meta.url);
