// Clients for the streaming routes, written by hand from the formats' specifications so
// that the tests do not trust the server's own code: an SSE parser, an NDJSON snapshot
// reader, and a model of the state that records are applied to.
import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import type { App } from '../../src/app.js';

export interface SseEvent {
  /** The event's own id field; undefined when it had none. */
  id: string | undefined;
  event: string;
  data: string;
}

export interface WireRecord {
  offset: number;
  key: string;
  op: 'set' | 'delete';
  value?: unknown;
  ts: number;
}

/**
 * Waits until the server has stopped writing to one of its sockets (the buffers toward a
 * reader that stopped reading are full); answers how much it wrote, what it has queued
 * on the socket included.
 */
export async function untilStalled(socket: Socket): Promise<number> {
  let last = -1;
  for (;;) {
    await new Promise((resolve) => setTimeout(resolve, 250));
    if (socket.bytesWritten === last) return last;
    last = socket.bytesWritten;
  }
}

export function baseUrl(app: App): string {
  return `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
}

/** An event stream read with node:http and parsed line by line as the SSE format says. */
export class SseClient {
  readonly events: SseEvent[] = [];
  /** Everything received, as sent. */
  text = '';
  comments = 0;
  retry: number | undefined;
  /** Resolves when the server ends the stream (or the connection drops). */
  readonly ended: Promise<void>;
  private buffer = '';
  private pending: SseEvent = { id: undefined, event: 'message', data: '' };
  private hasData = false;
  private listeners = new Set<() => void>();
  private endedFlag = false;

  private constructor(
    readonly request: http.ClientRequest,
    readonly response: http.IncomingMessage,
  ) {
    response.setEncoding('utf8');
    this.ended = new Promise((resolve) => {
      const finish = (): void => {
        this.endedFlag = true;
        this.notify();
        resolve();
      };
      response.on('end', finish);
      response.on('close', finish);
      response.on('error', finish);
    });
    response.on('data', (chunk: string) => this.feed(chunk));
  }

  /** Opens a stream; a non-200 answer is returned as { status, body }. */
  static async open(
    url: string,
    headers: Record<string, string> = {},
    agent?: http.Agent,
  ): Promise<SseClient | { status: number; headers: http.IncomingHttpHeaders; body: string }> {
    return new Promise((resolve, reject) => {
      const request = http.get(url, { headers: { accept: 'text/event-stream', ...headers }, agent }, (response) => {
        if (response.statusCode !== 200) {
          let body = '';
          response.setEncoding('utf8');
          response.on('data', (chunk: string) => (body += chunk));
          response.on('end', () => resolve({ status: response.statusCode!, headers: response.headers, body }));
          return;
        }
        resolve(new SseClient(request, response));
      });
      request.on('error', reject);
    });
  }

  static async connect(url: string, headers: Record<string, string> = {}, agent?: http.Agent): Promise<SseClient> {
    const opened = await SseClient.open(url, headers, agent);
    if (!(opened instanceof SseClient)) throw new Error(`stream refused: ${opened.status} ${opened.body}`);
    return opened;
  }

  get isEnded(): boolean {
    return this.endedFlag;
  }

  /** Events of one type, in order. */
  named(event: string): SseEvent[] {
    return this.events.filter((e) => e.event === event);
  }

  records(): WireRecord[] {
    return this.named('record').map((e) => JSON.parse(e.data) as WireRecord);
  }

  /** Waits until `predicate` holds for the events received so far. */
  async until(predicate: (events: SseEvent[]) => boolean, timeoutMs = 5000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!predicate(this.events)) {
      if (this.endedFlag) throw new Error(`stream ended while waiting; got ${JSON.stringify(this.events.slice(-3))}`);
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`timed out waiting; last events ${JSON.stringify(this.events.slice(-3))}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, left);
        function done(): void {
          clearTimeout(timer);
          resolve();
        }
        this.listeners.add(done);
      });
    }
  }

  close(): void {
    this.request.destroy();
  }

  private notify(): void {
    const listeners = this.listeners;
    this.listeners = new Set();
    for (const listener of listeners) listener();
  }

  private feed(chunk: string): void {
    this.text += chunk;
    this.buffer += chunk;
    let newline: number;
    while ((newline = this.buffer.search(/\r\n|\r|\n/)) >= 0) {
      const line = this.buffer.slice(0, newline);
      const width = this.buffer.startsWith('\r\n', newline) ? 2 : 1;
      this.buffer = this.buffer.slice(newline + width);
      this.line(line);
    }
    this.notify();
  }

  private line(line: string): void {
    if (line === '') return this.dispatch();
    if (line.startsWith(':')) {
      this.comments += 1;
      return;
    }
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'event') this.pending.event = value;
    else if (field === 'id') this.pending.id = value;
    else if (field === 'retry' && /^\d+$/.test(value)) this.retry = Number(value);
    else if (field === 'data') {
      this.pending.data = this.hasData ? `${this.pending.data}\n${value}` : value;
      this.hasData = true;
    }
  }

  private dispatch(): void {
    if (this.hasData) this.events.push(this.pending);
    this.pending = { id: undefined, event: 'message', data: '' };
    this.hasData = false;
  }
}

export interface Snapshot {
  offset: number;
  epoch: string;
  entries: { key: string; value: unknown; offset: number; ts: number }[];
  trailer: { end: true; offset: number; count: number; epoch: string; digest: string };
}

/**
 * Reads a whole NDJSON snapshot and checks its framing. `pauseMs` makes a slow reader
 * that waits after every chunk, so that the server has to wait for the socket.
 */
export async function readSnapshot(base: string, prefix = '', pauseMs = 0): Promise<Snapshot> {
  const url = `${base}/v1/snapshot?prefix=${encodeURIComponent(prefix)}`;
  const { status, headers, body } = await new Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }>(
    (resolve, reject) => {
      http
        .get(url, (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (chunk: Buffer) => {
            chunks.push(chunk);
            if (pauseMs > 0) {
              res.pause();
              setTimeout(() => res.resume(), pauseMs);
            }
          });
          res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks).toString('utf8') }));
          res.on('error', reject);
        })
        .on('error', reject);
    },
  );
  if (status !== 200) throw new Error(`snapshot answered ${status}: ${body}`);
  if (!body.endsWith('\n')) throw new Error('the snapshot does not end with a newline');
  const lines = body.slice(0, -1).split('\n').map((line) => JSON.parse(line) as Record<string, unknown>);
  const trailer = lines.pop() as Snapshot['trailer'];
  return {
    offset: Number(headers['x-log-offset']),
    epoch: String(headers['x-log-epoch']),
    entries: lines as Snapshot['entries'],
    trailer,
  };
}

/** Live keys → the JSON text of their values. */
export type State = Map<string, string>;

export function stateOf(entries: { key: string; value: unknown }[]): State {
  return new Map(entries.map((e) => [e.key, JSON.stringify(e.value)]));
}

export function applyRecords(state: State, records: WireRecord[]): State {
  for (const record of records) {
    if (record.op === 'set') state.set(record.key, JSON.stringify(record.value));
    else state.delete(record.key);
  }
  return state;
}

/** A state as a sorted plain object, for readable equality failures. */
export function plain(state: State): Record<string, unknown> {
  return Object.fromEntries([...state.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([k, v]) => [k, JSON.parse(v)]));
}

export interface ChangesAnswer {
  records: WireRecord[];
  next: number;
  head: number;
  epoch: string;
}

/** Every change after `after` (by pages of `limit`), checking that offsets strictly increase. */
export async function readAllChanges(base: string, after: number, prefix = '', limit = 1000): Promise<ChangesAnswer['records']> {
  const records: WireRecord[] = [];
  let position = after;
  for (;;) {
    const res = await fetch(`${base}/v1/changes?after=${position}&limit=${limit}&prefix=${encodeURIComponent(prefix)}`);
    const page = (await res.json()) as ChangesAnswer;
    if (res.status !== 200) throw new Error(`changes answered ${res.status}: ${JSON.stringify(page)}`);
    for (const record of page.records) {
      const last = records.length > 0 ? records[records.length - 1]!.offset : position;
      if (record.offset <= last) throw new Error(`offset ${record.offset} after ${last}`);
      records.push(record);
    }
    if (page.next < position) throw new Error(`next went back from ${position} to ${page.next}`);
    position = page.next;
    // next reaches head once nothing is left to read (as of that read).
    if (page.next === page.head) return records;
  }
}

export interface BatchAnswer {
  status: number;
  body: { records: { key: string; offset: number; value?: number }[]; offset: number };
}

/** POST /v1/records with the given items. */
export async function writeBatch(base: string, records: Record<string, unknown>[]): Promise<BatchAnswer> {
  const res = await fetch(`${base}/v1/records`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ records }),
  });
  return { status: res.status, body: (await res.json()) as BatchAnswer['body'] };
}

export interface ErrorBody {
  error: { code: string; message: string } & Record<string, unknown>;
}
