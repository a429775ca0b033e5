// The page and snapshot primitives of statelog's HTTP API, below both the client and
// watch(): requests with auth, retries and timeouts (on Node's own fetch, through an undici
// Agent that trusts `ca` when one is given), a page of changes and the pages after it, a
// snapshot checked against its trailer, and the stats. StatelogClient adds the writes,
// the listings and watch() on top; watch() needs only what is here.
import { Agent } from 'undici';
import type {
  changesSchema,
  Entry as EntrySchema,
  LogRecord as LogRecordSchema,
  Static,
  statsSchema,
} from '../../../src/contract/schemas.js';
import { DEFAULT_CHANGES_LIMIT } from '../../../src/contract/schemas.js';
import { connectionError, CutStreamError, StatelogError, timeoutError } from './errors.js';
import { backoffDelay, DEFAULT_RETRY, isConnectionError, sleep, type RetryPolicy } from './retry.js';

/** A live key: its value, the offset of the record that set it, and that record's time (ms). */
export type Entry<T = unknown> = Omit<Static<typeof EntrySchema>, 'value'> & { value: T };

type RecordFields = Omit<Static<typeof LogRecordSchema>, 'op' | 'value'>;
/** One record of the log: a set carries the value, a delete does not. */
export type LogRecord<T = unknown> = (RecordFields & { op: 'set'; value: T }) | (RecordFields & { op: 'delete' });

export type ChangesPage<T = unknown> = Omit<Static<(typeof changesSchema)['response'][200]>, 'records'> & {
  /** The request to make next, as the server's `Link: rel="next"` names it. */
  link?: string;
  records: LogRecord<T>[];
};

/** GET /v1/stats: the log's size, its dirt and the last compaction. */
export type Stats = Static<(typeof statsSchema)['response'][200]>;

export interface SnapshotOptions {
  prefix?: string;
  /**
   * Any state at this offset or later will do (a checkpoint's offset, or 0): the server
   * may answer from a snapshot it shares, and a cache in front may answer it.
   */
  minOffset?: number;
  /** The epoch the state must be of (after a `410 epoch_changed`): no older cached one will do. */
  epoch?: string;
  signal?: AbortSignal;
}

export interface ChangesOptions {
  after: number;
  prefix?: string;
  /** Only this exact key; not with `prefix`. */
  key?: string;
  limit?: number;
  /** Long-poll seconds when nothing is there (0 to 60). */
  wait?: number;
  epoch?: string;
  /** The generation of the log's history the reader holds (a snapshot's `gen`): a failover's loss is then told (410 log_diverged). */
  gen?: string;
  signal?: AbortSignal;
}

/** A snapshot's items (entries, or their JSON lines) with the offset and epoch they are the state at. */
export interface SnapshotOf<Item> extends AsyncIterable<Item> {
  offset: number;
  epoch: string;
  /** The generation of the log's history the state was read under, where the log has one (PostgreSQL). */
  gen?: string;
  /** Entries read so far; the trailer's count once the iteration has ended. */
  count: number;
  /** The trailer's digest of the entries sent, once the iteration has ended. */
  digest?: string;
}

export type Snapshot<T = unknown> = SnapshotOf<Entry<T>>;

export interface ClientOptions {
  url: string;
  token?: string;
  retry?: Partial<RetryPolicy>;
  /** Per attempt of a call, its answer's body included (a long poll's wait is added to it); streams have none. */
  timeoutMs?: number;
  /** Called before each retry with its cause (unreachable, timeout, 503, 429). */
  onRetry?: (cause: StatelogError, attempt: number) => void;
  /**
   * PEM certificate(s) of the CA that signed an https:// server's certificate (the file's
   * contents, such as readFileSync('ca.pem')). Trusted in place of Node's usual roots.
   */
  ca?: string | Buffer | (string | Buffer)[];
  /**
   * A client certificate and its private key (PEM), for a server that asks for one: its
   * subject CN names the server's token entry, and no token is then needed.
   */
  cert?: string | Buffer;
  key?: string | Buffer;
}

export interface Call {
  method: string;
  path: string;
  query?: Record<string, string | number | boolean | undefined>;
  body?: unknown;
  /** A body already in JSON text (kept as written: the digits of its numbers included). */
  text?: string;
  headers?: Record<string, string>;
  /** Retry connection failures and 503/429 (writes only with an idempotency key). */
  retry: boolean;
  signal?: AbortSignal;
  timeoutMs?: number;
}

/** The requests every part of the client makes, and the reads watch() follows. */
export class PageReader {
  readonly url: string;
  private readonly token: string | undefined;
  private readonly retryPolicy: RetryPolicy;
  private readonly timeoutMs: number;
  private readonly onRetry: ClientOptions['onRetry'];
  /** Connections that trust `ca` or present `cert`; undefined: fetch's own. */
  private readonly dispatcher: Agent | undefined;

  constructor(options: ClientOptions) {
    this.onRetry = options.onRetry;
    this.url = options.url.replace(/\/+$/, '');
    if (!/^https?:\/\//i.test(this.url)) throw new TypeError(`url must be http:// or https://, got "${options.url}"`);
    if ((options.cert === undefined) !== (options.key === undefined)) throw new TypeError('give cert and key together');
    const { ca, cert, key } = options;
    const tls = { ...(ca !== undefined ? { ca } : {}), ...(cert !== undefined && key !== undefined ? { cert, key } : {}) };
    this.dispatcher = Object.keys(tls).length === 0 ? undefined : new Agent({ connect: tls });
    this.token = options.token;
    this.retryPolicy = { ...DEFAULT_RETRY, ...options.retry };
    this.timeoutMs = options.timeoutMs ?? 30_000;
  }

  /** One page of changes after `after` (long-polls up to `wait` seconds when empty). */
  async changesPage<T = unknown>(options: ChangesOptions): Promise<ChangesPage<T>> {
    const { signal, after, epoch, gen, key, limit, prefix, wait } = options;
    // In the order of the server's Link, so that this is the very URL other followers at
    // `after` are sent to (a cache in front answers them together).
    const query = { after, epoch, gen, key, limit: limit ?? DEFAULT_CHANGES_LIMIT, prefix, wait: wait || undefined };
    return this.changesAt<T>('/v1/changes', query, signal);
  }

  /** The pages changes() reads, for ever: each says where the reader is (`next`) even when empty. */
  async *changesPages<T = unknown>(options: ChangesOptions): AsyncGenerator<ChangesPage<T>> {
    let page = await this.changesPage<T>({ wait: 30, ...options });
    for (;;) {
      yield page;
      if (page.link) {
        const next = new URL(page.link, 'http://link.invalid');
        page = await this.changesAt<T>(next.pathname, Object.fromEntries(next.searchParams), options.signal);
      } else {
        page = await this.changesPage<T>({ wait: 30, ...options, after: page.next });
      }
    }
  }

  private async changesAt<T>(path: string, query: Call['query'] & { wait?: number | string }, signal?: AbortSignal): Promise<ChangesPage<T>> {
    const call = { method: 'GET', path, query, retry: true, signal, timeoutMs: Number(query.wait ?? 0) * 1000 + this.timeoutMs };
    const { res, done } = await this.attempts(call);
    try {
      const page = (await res.json()) as ChangesPage<T>;
      const link = /^<([^>]+)>;\s*rel="next"/.exec(res.headers.get('link') ?? '')?.[1];
      return link ? { ...page, link } : page;
    } catch (err) {
      throw this.bodyFailure(err, call);
    } finally {
      done();
    }
  }

  /**
   * A consistent snapshot: iterate it for every live key at `offset`. Throws
   * CutStreamError if the stream ends without its trailer line.
   */
  async snapshot<T = unknown>(options: SnapshotOptions = {}): Promise<Snapshot<T>> {
    return this.openSnapshot(options, (_line, entry) => entry as Entry<T>);
  }

  /**
   * The snapshot's entries as the server wrote them, one JSON line each (the digits of
   * every number kept): for backups. Checked against the trailer as snapshot() is.
   */
  async snapshotLines(options: SnapshotOptions = {}): Promise<SnapshotOf<string>> {
    return this.openSnapshot(options, (line) => line);
  }

  private async openSnapshot<Item>(
    options: SnapshotOptions,
    item: (line: string, entry: Entry) => Item,
  ): Promise<SnapshotOf<Item>> {
    const res = await this.send({
      method: 'GET',
      path: '/v1/snapshot',
      query: { prefix: options.prefix, minOffset: options.minOffset, epoch: options.epoch },
      retry: true,
      signal: options.signal,
      timeoutMs: 0,
    });
    const offset = Number(res.headers.get('x-log-offset'));
    const epoch = res.headers.get('x-log-epoch') ?? '';
    const gen = res.headers.get('x-log-generation');
    const body = res.body!;
    const snapshot: SnapshotOf<Item> = {
      offset,
      epoch,
      ...(gen === null ? {} : { gen }),
      count: 0,
      async *[Symbol.asyncIterator]() {
        let trailer: { end: true; offset: number; count: number; digest?: string } | null = null;
        try {
          for await (const line of ndjsonLines(body)) {
            const parsed = JSON.parse(line) as Entry | { end: true; offset: number; count: number; digest?: string };
            if ('end' in parsed) {
              trailer = parsed;
              break;
            }
            snapshot.count++;
            yield item(line, parsed);
          }
        } catch (err) {
          if (options.signal?.aborted) throw err;
          // The connection broke mid-stream: what was read is an incomplete snapshot.
          throw new CutStreamError(`the snapshot stream was cut after ${snapshot.count} keys`, { cause: err });
        }
        if (!trailer) throw new CutStreamError('the snapshot stream ended without its last line');
        if (trailer.count !== snapshot.count || trailer.offset !== offset) {
          throw new CutStreamError(`the snapshot trailer says ${trailer.count} keys at ${trailer.offset}, read ${snapshot.count}`);
        }
        if (trailer.digest !== undefined) snapshot.digest = trailer.digest;
      },
    };
    return snapshot;
  }

  async stats(): Promise<Stats> {
    return (await this.json({ method: 'GET', path: '/v1/stats', retry: true })) as Stats;
  }

  /** Closes the connections kept for `ca` (none otherwise); the client is unusable after. */
  async close(): Promise<void> {
    await this.dispatcher?.close();
  }

  /** Opens a raw request with auth, for streams (used by watch()); not retried. */
  async open(path: string, query: Call['query'], headers: Record<string, string>, signal?: AbortSignal): Promise<Response> {
    return this.send({ method: 'GET', path, query, headers, retry: false, signal, timeoutMs: 0 });
  }

  protected async json(call: Call): Promise<unknown> {
    const { res, done } = await this.attempts(call);
    try {
      return await res.json();
    } catch (err) {
      throw this.bodyFailure(err, call);
    } finally {
      done();
    }
  }

  /** The timeout covers the body too: a body that stops coming is the same typed error. */
  private bodyFailure(err: unknown, call: Call): unknown {
    return (err as Error)?.name === 'TimeoutError' && !call.signal?.aborted ? timeoutError(this.url, this.timeoutOf(call)) : err;
  }

  /** Sends with retries, for a body read as a stream (its calls have no timeout). */
  protected async send(call: Call): Promise<Response> {
    const { res, done } = await this.attempts(call);
    done();
    return res;
  }

  private timeoutOf(call: Call): number {
    return call.timeoutMs ?? this.timeoutMs;
  }

  /**
   * Sends with retries; resolves with a 2xx response, throws StatelogError otherwise.
   * `done` ends the answering attempt's timeout and its link to the caller's signal, once
   * its body is read: a signal shared by many calls must not keep a listener and a timer
   * for every call that has ended.
   */
  private async attempts(call: Call): Promise<{ res: Response; done: () => void }> {
    const url = new URL(this.url + call.path);
    for (const [name, value] of Object.entries(call.query ?? {})) {
      if (value !== undefined && value !== '') url.searchParams.set(name, String(value));
    }
    const headers: Record<string, string> = { ...call.headers };
    if (this.token) headers.authorization = `Bearer ${this.token}`;
    const body = call.text ?? (call.body === undefined ? undefined : JSON.stringify(call.body));
    if (body !== undefined) headers['content-type'] = 'application/json';
    const timeoutMs = this.timeoutOf(call);

    for (let attempt = 0; ; attempt++) {
      const canRetry = call.retry && attempt < this.retryPolicy.retries;
      const link = linkTimeout(call.signal, timeoutMs);
      let res: Response;
      try {
        const init = { method: call.method, headers, body, signal: link.signal };
        // Node's fetch takes an undici dispatcher (not in the DOM's RequestInit).
        res = await fetch(url, this.dispatcher ? ({ ...init, dispatcher: this.dispatcher } as unknown as RequestInit) : init);
      } catch (err) {
        link.done();
        if (call.signal?.aborted) throw err;
        // No answer: a typed error naming the server and the cause, not fetch's bare TypeError.
        const failure = (err as Error)?.name === 'TimeoutError' ? timeoutError(this.url, timeoutMs) : isConnectionError(err) ? connectionError(this.url, err) : err;
        if (canRetry && failure instanceof StatelogError) {
          this.onRetry?.(failure, attempt);
          await sleep(backoffDelay(attempt, this.retryPolicy), call.signal);
          continue;
        }
        throw failure;
      }
      if (res.ok) return { res, done: link.done };
      try {
        if (canRetry && (res.status === 503 || res.status === 429)) {
          this.onRetry?.(new StatelogError(res.status, res.status === 503 ? 'unavailable' : 'too_many_requests', `${res.status} from ${this.url}`), attempt);
          const retryAfter = Number(res.headers.get('retry-after'));
          await res.body?.cancel();
          await sleep(backoffDelay(attempt, this.retryPolicy, Number.isFinite(retryAfter) ? retryAfter : undefined), call.signal);
          continue;
        }
        throw await toError(res).catch((err: unknown) => Promise.reject(this.bodyFailure(err, call)));
      } finally {
        link.done();
      }
    }
  }
}

/**
 * The caller's signal, aborted also after `timeoutMs` (0: never), and what undoes the
 * link. Linked by hand rather than with AbortSignal.any: Node 20 may collect the signal
 * that composes while fetch still depends on it, and an abort would then never reach the
 * request.
 */
function linkTimeout(signal: AbortSignal | undefined, timeoutMs: number): { signal: AbortSignal | undefined; done: () => void } {
  if (timeoutMs <= 0) return { signal, done: () => {} };
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(new DOMException('the request timed out', 'TimeoutError')), timeoutMs);
  timer.unref();
  const onAbort = () => controller.abort(signal!.reason);
  const done = () => {
    clearTimeout(timer);
    signal?.removeEventListener('abort', onAbort);
  };
  if (signal?.aborted) onAbort();
  else signal?.addEventListener('abort', onAbort, { once: true });
  controller.signal.addEventListener('abort', done, { once: true });
  return { signal: controller.signal, done };
}

async function toError(res: Response): Promise<StatelogError> {
  const text = await res.text();
  try {
    const { error } = JSON.parse(text) as { error: { code: string; message: string } & Record<string, unknown> };
    const { code, message, ...details } = error;
    return new StatelogError(res.status, code, message, details);
  } catch {
    return new StatelogError(res.status, 'unknown', text.slice(0, 200) || res.statusText);
  }
}

/** Splits a byte stream into lines. */
async function* ndjsonLines(body: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  let buffered = '';
  for await (const chunk of body) {
    buffered += decoder.decode(chunk, { stream: true });
    let newline: number;
    while ((newline = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, newline);
      buffered = buffered.slice(newline + 1);
      if (line.trim() !== '') yield line;
    }
  }
  buffered += decoder.decode();
  if (buffered.trim() !== '') yield buffered;
}