// The change stream (GET /v1/changes/stream) read with fetch, since the browser's
// EventSource cannot send an Authorization header. It behaves as EventSource does: the
// first request starts after an offset; when the connection drops or the server ends
// it, the reader reconnects to the same URL with `Last-Event-ID: <last id seen>`, so it
// resumes with no gap and no duplicate.
import { createParser } from 'eventsource-parser';
import { errorOf, type Api, type ErrorBody, type LogRecord } from './api.js';

export type StreamState = 'connecting' | 'live' | 'retrying' | 'stopped';

export interface StreamHandlers {
  record(record: LogRecord): void;
  /** The server moved on to `offset` (progress events, and every record). */
  position?(offset: number): void;
  /**
   * The stream cannot go on from where it is (`event: reset`, also as the only event of
   * a reconnection behind the horizon: compaction removed deletes it has not seen): the
   * reader must reload and start over.
   */
  reset(error: ErrorBody): void;
  /** 401: the token is no longer accepted. */
  unauthorized(): void;
  state(state: StreamState, detail: string): void;
}

export interface StreamOptions {
  prefix: string;
  /** Start after this offset (the offset of the listing the reader holds). */
  after: number;
  /** First wait before reconnecting, until the server sends `retry:`. */
  retryMs?: number;
  /** The server sends something at least every 15 s: silence this long means the connection is dead. */
  silenceMs?: number;
}

const MAX_RETRY_MS = 15_000;

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
    function done(): void {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
  });
}

export class ChangeStream {
  private readonly stopper = new AbortController();
  /** The connection in use, aborted by stop() or by the silence watchdog. */
  private connection: AbortController | null = null;
  private lastEventId: string | null = null;
  private retryMs: number;
  private readonly silenceMs: number;
  /** How many times it connected; more than one means it resumed. */
  connections = 0;

  constructor(
    private readonly api: Api,
    private readonly options: StreamOptions,
    private readonly handlers: StreamHandlers,
  ) {
    this.retryMs = options.retryMs ?? 1000;
    this.silenceMs = options.silenceMs ?? 40_000;
  }

  get stopped(): boolean {
    return this.stopper.signal.aborted;
  }

  start(): void {
    void this.run();
  }

  stop(): void {
    if (this.stopped) return;
    this.stopper.abort();
    this.connection?.abort();
    this.handlers.state('stopped', 'stopped');
  }

  private async run(): Promise<void> {
    let failures = 0;
    while (!this.stopped) {
      this.handlers.state(this.connections === 0 ? 'connecting' : 'retrying', 'connecting…');
      let outcome: 'ended' | 'done';
      try {
        outcome = await this.connect();
        failures = 0;
      } catch {
        // Refused (5xx, 429), unreachable, cut, or silent too long: try again, waiting longer each time.
        if (this.stopped) return;
        failures += 1;
        outcome = 'ended';
      }
      if (outcome === 'done' || this.stopped) return;
      const wait = Math.min(MAX_RETRY_MS, this.retryMs * 2 ** Math.max(0, failures - 1));
      this.handlers.state('retrying', `connection lost; reconnecting in ${Math.ceil(wait / 1000)} s`);
      await sleep(wait, this.stopper.signal);
    }
  }

  /** One connection: 'done' when the reader must not reconnect, 'ended' when it should. */
  private async connect(): Promise<'ended' | 'done'> {
    const connection = new AbortController();
    this.connection = connection;
    this.connections += 1;
    const headers = this.api.headers({ accept: 'text/event-stream' });
    if (this.lastEventId !== null) headers.set('last-event-id', this.lastEventId);
    const url = this.api.url('v1/changes/stream', { prefix: this.options.prefix, after: this.options.after });
    const res = await fetch(url, { headers, cache: 'no-store', signal: connection.signal });
    if (res.status === 401) {
      this.handlers.unauthorized();
      return 'done';
    }
    if (res.status === 410) {
      this.handlers.reset(await errorOf(res));
      return 'done';
    }
    if (!res.ok || !res.body) throw new Error(`the stream answered ${res.status}`);
    if (this.stopped) return 'done';
    this.handlers.state('live', 'live');
    return this.read(res.body, connection);
  }

  private async read(body: ReadableStream<Uint8Array>, connection: AbortController): Promise<'ended' | 'done'> {
    const ended: { reset: ErrorBody | null } = { reset: null };
    const parser = createParser({
      onRetry: (ms) => {
        this.retryMs = ms;
      },
      onEvent: (message) => {
        if (ended.reset || this.stopped) return;
        if (message.id !== undefined) {
          this.lastEventId = message.id;
          const offset = Number(message.id);
          if (Number.isSafeInteger(offset)) this.handlers.position?.(offset);
        }
        if (message.event === 'record') this.handlers.record(JSON.parse(message.data) as LogRecord);
        else if (message.event === 'reset') ended.reset = (JSON.parse(message.data) as { error: ErrorBody }).error;
      },
    });
    const reader = body.getReader();
    const decoder = new TextDecoder();
    let watchdog = setTimeout(() => connection.abort(), this.silenceMs);
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return 'ended';
        clearTimeout(watchdog);
        watchdog = setTimeout(() => connection.abort(), this.silenceMs);
        parser.feed(decoder.decode(value, { stream: true }));
        if (ended.reset) {
          void reader.cancel().catch(() => {});
          this.handlers.reset(ended.reset);
          return 'done';
        }
      }
    } finally {
      clearTimeout(watchdog);
    }
  }
}
