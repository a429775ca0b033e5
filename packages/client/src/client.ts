// A typed client for statelog's HTTP API, on Node's own fetch (through an undici Agent
// that trusts `ca` when one is given, for a server with a private CA). Writes carry an
// Idempotency-Key (generated unless given) and are retried on connection failures and
// 503/429 with jittered backoff: a retry is answered from the server's memory of the
// first attempt, so it never applies twice.
import { randomUUID } from 'node:crypto';
import { Agent } from 'undici';
import type {
  BatchItem as BatchItemSchema,
  changesSchema,
  compactSchema,
  Consumer as ConsumerSchema,
  listConsumersSchema,
  Entry as EntrySchema,
  keyHistorySchema,
  LastCompaction as LastCompactionSchema,
  LogRecord as LogRecordSchema,
  postRecordsSchema,
  Static,
  statsSchema,
  Written as WrittenSchema,
} from '../../../src/contract/schemas.js';
import { DEFAULT_CHANGES_LIMIT } from '../../../src/contract/schemas.js';
import { connectionError, CutStreamError, StatelogError, timeoutError } from './errors.js';
import { backoffDelay, DEFAULT_RETRY, isConnectionError, sleep, type RetryPolicy } from './retry.js';
import { watch, type WatchEvent, type WatchOptions } from './watch.js';
import { consumerWatch } from './consumer-watch.js';

/** A position the server keeps for a group of workers, with the head's distance from it. */
export type Consumer = Static<typeof ConsumerSchema>;
export type ConsumerList = Static<(typeof listConsumersSchema)['response'][200]>;

export interface ConsumerCommitOptions {
  /** The epoch `offset` belongs to: another one is refused (410 epoch_changed). */
  epoch?: string;
  /** Allows a position behind the committed one (else 409 conflict). */
  rewind?: boolean;
  /** Keep the delete markers above the position from compaction (the server bounds it); absent: unchanged. */
  hold?: boolean;
  /** Commit only if the consumer stands at this offset, or ('*') exists. */
  ifMatch?: number | '*';
  signal?: AbortSignal;
}

/** A live key: its value, the offset of the record that set it, and that record's time (ms). */
export type Entry<T = unknown> = Omit<Static<typeof EntrySchema>, 'value'> & { value: T };

type RecordFields = Omit<Static<typeof LogRecordSchema>, 'op' | 'value'>;
/** One record of the log: a set carries the value, a delete does not. */
export type LogRecord<T = unknown> = (RecordFields & { op: 'set'; value: T }) | (RecordFields & { op: 'delete' });

export type Written = Static<typeof WrittenSchema>;

export interface WriteOptions {
  /** Write only if the key's live record has this offset, or ('*') if the key is live. */
  ifMatch?: number | '*';
  /** '*': write only if the key has no live value. */
  ifNoneMatch?: '*';
  /** Defaults to a new random key per call (kept across that call's retries). */
  idempotencyKey?: string;
  signal?: AbortSignal;
}

export interface IncrOptions extends Omit<WriteOptions, 'ifMatch' | 'ifNoneMatch'> {
  /** The least result allowed (inclusive). */
  min?: number;
  /** The greatest result allowed (inclusive). */
  max?: number;
}

type ItemFields = Static<typeof BatchItemSchema>;
type ItemConditions = Pick<ItemFields, 'key' | 'ifOffset' | 'ifAbsent'>;
/** One item of a batch; the schema's flat object, told apart by `op` as the server does. */
export type BatchItem =
  | (ItemConditions & { op?: 'set'; value: unknown; ttlMs?: number })
  | (ItemConditions & { op: 'delete' })
  /** `min`, `max`: the sum must stay within them, else the batch is refused (409 out_of_range). */
  | (ItemConditions & { op: 'incr'; by: number; min?: number; max?: number });

export type BatchResult = Static<(typeof postRecordsSchema)['response'][200]>;

export type ChangesPage<T = unknown> = Omit<Static<(typeof changesSchema)['response'][200]>, 'records'> & {
  /** The request to make next, as the server's `Link: rel="next"` names it. */
  link?: string;
  records: LogRecord<T>[];
};

/**
 * Records of one key, newest first; `next` is the `before` that goes on with older ones
 * (null: the log holds nothing older).
 */
export type HistoryPage<T = unknown> = Omit<Static<(typeof keyHistorySchema)['response'][200]>, 'records'> & {
  records: LogRecord<T>[];
};

export interface HistoryOptions {
  /** Most records to return, 1 to 1000 (default 100). */
  limit?: number;
  /** Only records with an offset below this one: a page's `next`. */
  before?: number;
  signal?: AbortSignal;
}

/** GET /v1/stats: the log's size, its dirt and the last compaction. */
export type Stats = Static<(typeof statsSchema)['response'][200]>;
export type LastCompaction = Static<typeof LastCompactionSchema>;

/** What one compaction pass removed, and the horizon and head it ran at. */
export type CompactResult = Static<(typeof compactSchema)['response'][200]>;

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
  signal?: AbortSignal;
}

/** A snapshot's items (entries, or their JSON lines) with the offset and epoch they are the state at. */
export interface SnapshotOf<Item> extends AsyncIterable<Item> {
  offset: number;
  epoch: string;
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

interface Call {
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

const keyPath = (key: string) => `/v1/keys/${encodeURIComponent(key)}`;
const consumerPath = (name: string) => `/v1/consumers/${encodeURIComponent(name)}`;

function conditionHeaders(options: WriteOptions): Record<string, string> {
  const headers: Record<string, string> = {};
  if (options.ifMatch !== undefined) headers['if-match'] = options.ifMatch === '*' ? '*' : `"${options.ifMatch}"`;
  if (options.ifNoneMatch) headers['if-none-match'] = '*';
  return headers;
}

export class StatelogClient {
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

  /** The live value of a key, or null if it has none. */
  /** The key's entry, with `expiresAt` (ms since the epoch) when it has a TTL; null when absent or expired. */
  async get<T = unknown>(key: string, options: { signal?: AbortSignal } = {}): Promise<(Entry<T> & { expiresAt?: number }) | null> {
    try {
      return (await this.json({ method: 'GET', path: keyPath(key), retry: true, ...options })) as Entry<T> & { expiresAt?: number };
    } catch (err) {
      if (err instanceof StatelogError && err.code === 'not_found') return null;
      throw err;
    }
  }

  /** With `ttlMs` the value expires that long after the write, and the server deletes the key. */
  async put(key: string, value: unknown, options: WriteOptions & { ttlMs?: number } = {}): Promise<Written> {
    const { ttlMs, ...rest } = options;
    return (await this.write('PUT', keyPath(key), ttlMs === undefined ? { value } : { value, ttlMs }, rest)) as Written;
  }

  /** Appends a delete marker; throws StatelogError not_found if the key has no live value. */
  async delete(key: string, options: WriteOptions = {}): Promise<Written> {
    return (await this.write('DELETE', keyPath(key), undefined, options)) as Written;
  }

  /** Applies the items atomically, in order. */
  async batch(records: BatchItem[], options: Omit<WriteOptions, 'ifMatch' | 'ifNoneMatch'> = {}): Promise<BatchResult> {
    return (await this.write('POST', '/v1/records', { records }, options)) as BatchResult;
  }

  /**
   * A batch whose items are given as JSON text, each `{"key":...,"value":...}` or any
   * other batch item: sent as written, so values keep every digit of their numbers.
   */
  async batchJson(items: string[], options: Omit<WriteOptions, 'ifMatch' | 'ifNoneMatch'> = {}): Promise<BatchResult> {
    const headers = { 'idempotency-key': options.idempotencyKey ?? randomUUID() };
    const text = `{"records":[${items.join(',')}]}`;
    return (await this.json({ method: 'POST', path: '/v1/records', text, headers, retry: true, signal: options.signal })) as BatchResult;
  }

  /**
   * Follows the change stream as an async iterator, as nats.js kv.watch() does: from a
   * snapshot (then `initialized`) or after an offset, resuming across disconnects;
   * ends when `signal` aborts. See WatchOptions and WatchEvent.
   */
  watch<T = unknown>(options: WatchOptions = {}): AsyncGenerator<WatchEvent<T>, void, undefined> {
    return options.consumer === undefined ? watch<T>(this, options) : consumerWatch<T>(this, options);
  }

  /** The consumer of this name (this token's own, with a scoped token); null when there is none. */
  async consumer(name: string, options: { signal?: AbortSignal } = {}): Promise<Consumer | null> {
    try {
      return (await this.json({ method: 'GET', path: consumerPath(name), retry: true, ...options })) as Consumer;
    } catch (err) {
      if (err instanceof StatelogError && err.code === 'not_found') return null;
      throw err;
    }
  }

  async consumers(options: { signal?: AbortSignal } = {}): Promise<ConsumerList> {
    return (await this.json({ method: 'GET', path: '/v1/consumers', retry: true, ...options })) as ConsumerList;
  }

  /** Commits a position: forward only unless `rewind`. Retried as reads are: a repeated commit changes nothing. */
  async commitConsumer(name: string, offset: number, options: ConsumerCommitOptions = {}): Promise<Consumer> {
    const { ifMatch, signal, ...rest } = options;
    const headers: Record<string, string> = ifMatch === undefined ? {} : { 'if-match': ifMatch === '*' ? '*' : `"${ifMatch}"` };
    return (await this.json({ method: 'PUT', path: consumerPath(name), body: { offset, ...rest }, headers, retry: true, signal })) as Consumer;
  }

  /** Deletes a consumer (and its hold); false when there was none. */
  async deleteConsumer(name: string, options: { ifMatch?: number; signal?: AbortSignal } = {}): Promise<boolean> {
    const headers: Record<string, string> = options.ifMatch === undefined ? {} : { 'if-match': `"${options.ifMatch}"` };
    try {
      await this.send({ method: 'DELETE', path: consumerPath(name), headers, retry: true, signal: options.signal });
      return true;
    } catch (err) {
      if (err instanceof StatelogError && err.code === 'not_found') return false;
      throw err;
    }
  }

  /**
   * Adds `by` to a number (an absent key counts as 0) and returns the new value; with `min`
   * or `max`, only if the sum stays within them, else it throws 409 `out_of_range`, whose
   * details carry the key's current `value` and `offset`.
   */
  async incr(key: string, by: number, options: IncrOptions = {}): Promise<number> {
    const item: BatchItem = { key, op: 'incr', by };
    if (options.min !== undefined) item.min = options.min;
    if (options.max !== undefined) item.max = options.max;
    const result = await this.batch([item], options);
    return result.records[0]!.value!;
  }

  /** Every live key with the prefix, in byte order, page by page. */
  async *list<T = unknown>(options: { prefix?: string; pageSize?: number; signal?: AbortSignal } = {}): AsyncGenerator<Entry<T>> {
    let cursor: string | undefined;
    do {
      const page = (await this.json({
        method: 'GET',
        path: '/v1/keys',
        query: { prefix: options.prefix, limit: options.pageSize ?? 1000, cursor },
        retry: true,
        signal: options.signal,
      })) as { items: Entry<T>[]; cursor: string | null };
      yield* page.items;
      cursor = page.cursor ?? undefined;
    } while (cursor !== undefined);
  }

  /**
   * Up to `limit` of the key's records still in the log, newest first. The server
   * examines a bounded stretch of the log per request and may answer a short page with
   * a `next`; this follows `next` until it has `limit` records or the log has no more.
   */
  async history<T = unknown>(key: string, options: HistoryOptions = {}): Promise<HistoryPage<T>> {
    const { signal, limit = 100, before } = options;
    const records: LogRecord<T>[] = [];
    let next: number | null | undefined = before;
    for (;;) {
      const page = (await this.json({
        method: 'GET',
        path: `${keyPath(key)}/history`,
        query: { limit: limit - records.length, before: next ?? undefined },
        retry: true,
        signal,
      })) as HistoryPage<T>;
      records.push(...page.records);
      next = page.next;
      if (next === null || records.length >= limit) return { ...page, records, next };
    }
  }

  /** One page of changes after `after` (long-polls up to `wait` seconds when empty). */
  async changesPage<T = unknown>(options: ChangesOptions): Promise<ChangesPage<T>> {
    const { signal, after, epoch, key, limit, prefix, wait } = options;
    // In the order of the server's Link, so that this is the very URL other followers at
    // `after` are sent to (a cache in front answers them together).
    const query = { after, epoch, key, limit: limit ?? DEFAULT_CHANGES_LIMIT, prefix, wait: wait || undefined };
    return this.changesAt<T>('/v1/changes', query, signal);
  }

  /**
   * Every record after `after`, for ever, by long poll, each request the one the last
   * page names (`Link: rel="next"`): followers at one position ask one URL, which a
   * cache in front answers once for all. Throws StatelogError with mustResnapshot when
   * the server can no longer serve that offset.
   */
  async *changes<T = unknown>(options: ChangesOptions): AsyncGenerator<LogRecord<T>> {
    for await (const page of this.changesPages<T>(options)) yield* page.records;
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
    const body = res.body!;
    const snapshot: SnapshotOf<Item> = {
      offset,
      epoch,
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

  /** Runs a compaction now (admin). */
  async compact(): Promise<CompactResult> {
    return (await this.json({ method: 'POST', path: '/v1/admin/compact', retry: false, timeoutMs: 0 })) as CompactResult;
  }

  /** Closes the connections kept for `ca` (none otherwise); the client is unusable after. */
  async close(): Promise<void> {
    await this.dispatcher?.close();
  }

  /** Opens a raw request with auth, for streams (used by watch()); not retried. */
  async open(path: string, query: Call['query'], headers: Record<string, string>, signal?: AbortSignal): Promise<Response> {
    return this.send({ method: 'GET', path, query, headers, retry: false, signal, timeoutMs: 0 });
  }

  private write(method: string, path: string, body: unknown, options: WriteOptions): Promise<unknown> {
    const headers = { ...conditionHeaders(options), 'idempotency-key': options.idempotencyKey ?? randomUUID() };
    return this.json({ method, path, body, headers, retry: true, signal: options.signal });
  }

  private async json(call: Call): Promise<unknown> {
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
  private async send(call: Call): Promise<Response> {
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
