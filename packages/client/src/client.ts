// A typed client for statelog's HTTP API: the page and snapshot reads of PageReader
// (pages.ts) and the consumer calls (consumers.ts), with the keys' writes, listings,
// history and watch() on top. Writes carry an Idempotency-Key (generated unless given)
// and are retried on connection failures and 503/429 with jittered backoff: a retry is
// answered from the server's memory of the first attempt, so it never applies twice.
import { randomUUID } from 'node:crypto';
import type {
  BatchItem as BatchItemSchema,
  compactSchema,
  keyHistorySchema,
  LastCompaction as LastCompactionSchema,
  postRecordsSchema,
  Static,
  Written as WrittenSchema,
} from '../../../src/contract/schemas.js';
import type { ChangesOptions, Entry, LogRecord } from './pages.js';
import { ConsumerCalls } from './consumers.js';
import { StatelogError } from './errors.js';
import { watch, type WatchEvent, type WatchOptions } from './watch.js';
import { consumerWatch } from './consumer-watch.js';

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

export type LastCompaction = Static<typeof LastCompactionSchema>;

/** What one compaction pass removed, and the horizon and head it ran at. */
export type CompactResult = Static<(typeof compactSchema)['response'][200]>;

const keyPath = (key: string) => `/v1/keys/${encodeURIComponent(key)}`;

function conditionHeaders(options: WriteOptions): Record<string, string> {
  const headers: Record<string, string> = {};
  if (options.ifMatch !== undefined) headers['if-match'] = options.ifMatch === '*' ? '*' : `"${options.ifMatch}"`;
  if (options.ifNoneMatch) headers['if-none-match'] = '*';
  return headers;
}

export class StatelogClient extends ConsumerCalls {
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

  /**
   * Every record after `after`, for ever, by long poll, each request the one the last
   * page names (`Link: rel="next"`): followers at one position ask one URL, which a
   * cache in front answers once for all. Throws StatelogError with mustResnapshot when
   * the server can no longer serve that offset.
   */
  async *changes<T = unknown>(options: ChangesOptions): AsyncGenerator<LogRecord<T>> {
    for await (const page of this.changesPages<T>(options)) yield* page.records;
  }

  /** Runs a compaction now (admin). */
  async compact(): Promise<CompactResult> {
    return (await this.json({ method: 'POST', path: '/v1/admin/compact', retry: false, timeoutMs: 0 })) as CompactResult;
  }

  private write(method: string, path: string, body: unknown, options: WriteOptions): Promise<unknown> {
    const headers = { ...conditionHeaders(options), 'idempotency-key': options.idempotencyKey ?? randomUUID() };
    return this.json({ method, path, body, headers, retry: true, signal: options.signal });
  }
}
