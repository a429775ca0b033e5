// watch(): the changes as an async iterator, as nats.js kv.watch() gives a key-value
// bucket's updates. It starts from a snapshot (then signals `initialized`) or after an
// offset, resumes after the last offset it saw when the connection drops or the server
// restarts (no gap, no duplicate), and starts over from a new snapshot only when the
// server says so (`reset`). It ends when the caller's signal aborts. By default it
// reads GET /v1/snapshot?minOffset and follows the changes' `Link`, answers an HTTP
// cache in front can share between followers; `follow: 'stream'` uses the event stream.
import type { ChangesPage, LogRecord, PageReader } from './pages.js';
import { CutStreamError, describeCause, StatelogError } from './errors.js';
import { backoffDelay, DEFAULT_RETRY, sleep, type RetryPolicy } from './retry.js';
import { readEvents } from './sse.js';

export interface WatchOptions {
  /** Only keys with this prefix. */
  prefix?: string;
  /** Only this key (exact match); `prefix` is then not used. */
  key?: string;
  /**
   * Start after this offset (of `epoch`, if given), or at the head now ('head').
   * Without it: from a snapshot.
   */
  after?: number | 'head';
  /** The epoch `after` (without it, the first snapshot) belongs to: another epoch is a reset. */
  epoch?: string;
  /**
   * The generation of the log's history `after` was read under (a Link's `gen`, a
   * snapshot's X-Log-Generation, an `initialized` or `progress` event's `gen`): a failover
   * that lost records the reader holds is then a reset (log_diverged). Without it, `after`
   * is taken to be of the log's first generation.
   */
  gen?: string;
  /**
   * The first snapshot may be of any state at this offset or later (a cached or shared
   * one); default 0. Snapshots after a reset ask for what the reset requires.
   */
  minOffset?: number;
  /**
   * 'changes' (default): long polls, each the request the last answer names, which a
   * cache in front answers once for all its followers. 'stream': one event stream
   * (GET /v1/changes/stream), which no cache shares.
   */
  follow?: 'changes' | 'stream';
  /**
   * On a reset (the position was compacted away, is ahead of the head, or belongs to
   * another epoch): 'snapshot' yields a `reset` event and starts again from a new
   * snapshot; 'throw' ends the iteration with the StatelogError. Default: 'snapshot'
   * for a watch that started from a snapshot, else 'throw'.
   */
  onReset?: 'snapshot' | 'throw';
  signal?: AbortSignal;
  /** Backoff between reconnections (attempts are unlimited; `retries` is ignored). */
  retry?: Partial<RetryPolicy>;
  /** Called before each reconnection with its cause and the wait. */
  onRetry?: (cause: StatelogError, delayMs: number) => void;
  /** With 'stream': no byte for this long (the server sends progress at least every 15 s), the connection is dead. */
  silenceMs?: number;
  /**
   * A consumer the server keeps for this watch (its name, or with options): the watch
   * starts after the consumer's committed offset when it has one and `after` is not
   * given (a reset then starts over from a snapshot), and commits each `initialized` and
   * `progress` offset once the caller asks for the next event, having handled all before it,
   * the changes within a second, and what was handled when the signal stops the watch.
   */
  consumer?: string | ConsumerOption;
}

export interface ConsumerOption {
  name: string;
  /** Commit with a hold: compaction keeps the delete markers above the position (bounded by the server). */
  hold?: boolean;
  /** Start from the committed offset (default true); false: only commit (a mirror restoring its state from a file). */
  resume?: boolean;
}

export type WatchEvent<T = unknown> =
  /** A record: with `snapshot`, a live key of the snapshot (op 'set'); else a change, in offset order. */
  | { type: 'record'; record: LogRecord<T>; snapshot: boolean }
  /** The snapshot is complete at `offset`, or the server accepted the start offset: what follows is live. */
  | { type: 'initialized'; offset: number; epoch: string; digest?: string; gen?: string }
  /** Every matching record up to `offset` has been given (under generation `gen`, where the log has one). */
  | { type: 'progress'; offset: number; gen?: string }
  /**
   * Throw away what the watch gave so far (a snapshot follows): the server cannot serve
   * the position (`reason` its code), or a snapshot was cut midway ('snapshot_cut').
   */
  | { type: 'reset'; reason: string; error: Error };

interface Position {
  /** After which offset the stream resumes; null: from a (new) snapshot. */
  after: number | null;
  epoch: string | undefined;
  /** The generation `after` was read under: sent on every reconnection. */
  gen: string | undefined;
  /** What the next snapshot may be: any state at this offset or later, of this epoch if given. */
  snapshot: { minOffset?: number; epoch?: string };
}

/** What either way of following tells the watch, in the stream's terms. */
type Wire<T> =
  /** The server accepted the start offset (a stream's opening lines, or a first page). */
  | { kind: 'opened'; epoch: string }
  | { kind: 'record'; record: LogRecord<T> }
  | { kind: 'snapshot-end'; offset: number; epoch: string; digest?: string; gen?: string }
  | { kind: 'progress'; offset: number; gen?: string };

interface Source {
  client: PageReader;
  at: Position;
  prefix: string | undefined;
  key: string | undefined;
  signal: AbortSignal;
  /** Called on every byte of a stream (its silence timer). */
  heard: () => void;
}

export async function* watch<T>(client: PageReader, options: WatchOptions): AsyncGenerator<WatchEvent<T>, void, undefined> {
  const { signal, key } = options;
  const policy = { ...DEFAULT_RETRY, ...options.retry };
  const silenceMs = options.silenceMs ?? 45_000;
  const onReset = options.onReset ?? (options.after === undefined ? 'snapshot' : 'throw');
  const follow = options.follow === 'stream' ? streamWire<T> : changesWire<T>;
  // The server narrows to the key (`key=`); the exact key is checked here as well, so
  // that a server without `key=` (which ignores it) only costs the records of other keys.
  const prefix = key === undefined ? (options.prefix ?? '') : undefined;
  const first = { minOffset: options.minOffset ?? 0, ...(options.after === undefined && options.epoch !== undefined ? { epoch: options.epoch } : {}) };
  const at: Position = { after: null, epoch: options.epoch, gen: options.gen, snapshot: first };
  if (options.after === 'head') {
    const stats = (await client.stats()) as { head: number; epoch?: string };
    at.after = stats.head;
    at.epoch ??= stats.epoch;
  } else if (options.after !== undefined) {
    at.after = options.after;
  }
  let initialized = false;
  let attempt = 0;

  while (!signal?.aborted) {
    const connection = new AbortController();
    const stopConnection = (): void => connection.abort(signal?.reason);
    signal?.addEventListener('abort', stopConnection, { once: true });
    let silent: NodeJS.Timeout | undefined;
    const heard = (): void => {
      clearTimeout(silent);
      silent = setTimeout(() => connection.abort(new Error(`no data for ${silenceMs} ms`)), silenceMs);
      silent.unref?.();
    };
    const inSnapshot = at.after === null;
    let snapshotEnded = false;
    let cause: StatelogError;
    try {
      for await (const wire of follow({ client, at, prefix, key, signal: connection.signal, heard })) {
        switch (wire.kind) {
          case 'opened':
            if (!initialized && at.after !== null) {
              initialized = true;
              at.epoch ??= wire.epoch;
              yield { type: 'initialized', offset: at.after, epoch: wire.epoch, ...(at.gen === undefined ? {} : { gen: at.gen }) };
            }
            break;
          case 'record': {
            const { record } = wire;
            if (at.after === null) {
              if (key === undefined || record.key === key) yield { type: 'record', record, snapshot: true };
              break;
            }
            if (record.offset <= at.after) break; // given already
            at.after = record.offset;
            attempt = 0;
            // A record of another key that the prefix let through still moves the reader.
            if (key === undefined || record.key === key) yield { type: 'record', record, snapshot: false };
            else yield { type: 'progress', offset: record.offset };
            break;
          }
          case 'snapshot-end':
            at.after = wire.offset;
            at.epoch = wire.epoch;
            at.gen = wire.gen;
            snapshotEnded = true;
            initialized = true;
            attempt = 0;
            // `digest`: of the keys the snapshot sent (src/contract/digest.ts).
            yield {
              type: 'initialized',
              offset: wire.offset,
              epoch: wire.epoch,
              ...(wire.digest === undefined ? {} : { digest: wire.digest }),
              ...(wire.gen === undefined ? {} : { gen: wire.gen }),
            };
            break;
          case 'progress': {
            // A new generation is told even without new records: the reader resumes under it.
            const newGeneration = wire.gen !== undefined && wire.gen !== at.gen;
            if (at.after !== null && (wire.offset > at.after || newGeneration)) {
              at.after = Math.max(at.after, wire.offset);
              at.gen = wire.gen ?? at.gen;
              attempt = 0;
              yield { type: 'progress', offset: at.after, ...(at.gen === undefined ? {} : { gen: at.gen }) };
            }
            break;
          }
        }
      }
      cause = new StatelogError(0, 'unreachable', `the stream from ${client.url} ended (the server stopped)`, { url: client.url });
    } catch (err) {
      if (signal?.aborted) return;
      if (err instanceof StatelogError && err.mustResnapshot) {
        if (onReset === 'throw') throw err;
        yield { type: 'reset', reason: err.code, error: err };
        at.snapshot = snapshotAfter(err, at);
        at.after = null;
        at.epoch = undefined;
        at.gen = undefined;
        initialized = false;
        continue;
      }
      if (err instanceof StatelogError && !retriable(err)) throw err;
      cause = err instanceof StatelogError ? err : lostStream(client.url, err, connection.signal);
    } finally {
      clearTimeout(silent);
      signal?.removeEventListener('abort', stopConnection);
      connection.abort();
    }
    if (inSnapshot && !snapshotEnded) {
      // What was given of the snapshot is incomplete: it is taken again from the start.
      const error = new CutStreamError(`the snapshot was cut: ${cause.message}`, { cause });
      yield { type: 'reset', reason: 'snapshot_cut', error };
    }
    const delay = backoffDelay(attempt++, policy);
    options.onRetry?.(cause, delay);
    try {
      await sleep(delay, signal);
    } catch {
      return;
    }
  }
}

/**
 * What a snapshot after a reset may be: of the new epoch after `epoch_changed` (no older
 * cached one), at or past the compaction horizon after `offset_compacted`.
 */
function snapshotAfter(err: StatelogError, at: Position): Position['snapshot'] {
  const epoch = typeof err.details.epoch === 'string' ? err.details.epoch : undefined;
  if (err.code === 'epoch_changed') return { minOffset: 0, ...(epoch === undefined ? {} : { epoch }) };
  if (err.code === 'offset_compacted') {
    // Past the horizon: a cached snapshot at the position just refused would be refused again.
    const horizon = typeof err.details.horizon === 'number' ? err.details.horizon : 0;
    return { minOffset: Math.max(horizon, at.after ?? 0), ...(at.epoch === undefined ? {} : { epoch: at.epoch }) };
  }
  return {};
}

/** A snapshot (GET /v1/snapshot), then the changes after it by long poll, following `Link`. */
async function* changesWire<T>({ client, at, prefix, key, signal }: Source): AsyncGenerator<Wire<T>> {
  let gen = at.gen;
  if (at.after === null) {
    // /v1/snapshot has no `key=`: the key's prefix, and the watch keeps the exact key.
    const snapshot = await client.snapshot<T>({ prefix: key ?? prefix, ...at.snapshot, signal });
    gen = snapshot.gen;
    for await (const entry of snapshot) yield { kind: 'record', record: { ...entry, op: 'set' } };
    yield {
      kind: 'snapshot-end',
      offset: snapshot.offset,
      epoch: snapshot.epoch,
      ...(snapshot.digest === undefined ? {} : { digest: snapshot.digest }),
      ...(gen === undefined ? {} : { gen }),
    };
  }
  // Read after the yields above: the watch has moved `at` by then.
  const from = { after: at.after!, ...(key === undefined ? { prefix } : { key }), ...(at.epoch === undefined ? {} : { epoch: at.epoch }), ...(gen === undefined ? {} : { gen }), signal };
  // A first page without waiting: the position is accepted (or refused) at once.
  const first = await client.changesPage<T>({ ...from, wait: 0 });
  yield* pageWire(first);
  // Under the generation the first page was served in: it may have begun a new one.
  const served = generationOf(first) ?? gen;
  const next = { ...from, after: first.next, ...(served === undefined ? {} : { gen: served }), wait: 30 };
  for await (const page of client.changesPages<T>(next)) yield* pageWire(page);
}

/** The generation a page was served under, as its Link names it for the next request. */
function generationOf(page: ChangesPage<unknown>): string | undefined {
  return (page.link === undefined ? null : new URL(page.link, 'http://link.invalid').searchParams.get('gen')) ?? undefined;
}

function* pageWire<T>(page: ChangesPage<T>): Generator<Wire<T>> {
  yield { kind: 'opened', epoch: page.epoch };
  for (const record of page.records) yield { kind: 'record', record };
  const gen = generationOf(page);
  yield { kind: 'progress', offset: page.next, ...(gen === undefined ? {} : { gen }) };
}

/** The event stream (GET /v1/changes/stream), with `snapshot=true` when there is no position. */
async function* streamWire<T>({ client, at, prefix, key, signal, heard }: Source): AsyncGenerator<Wire<T>> {
  heard();
  const query = at.after === null ? { snapshot: 'true', prefix, key } : { after: at.after, prefix, key, epoch: at.epoch, gen: at.gen };
  const headers: Record<string, string> = at.after === null ? {} : { 'last-event-id': String(at.after) };
  const res = await client.open('/v1/changes/stream', query, headers, signal);
  const served = res.headers.get('x-log-epoch') ?? at.epoch ?? '';
  for await (const event of readEvents(res.body!)) {
    heard();
    // The start offset is accepted once the stream's opening lines came without a
    // reset after them (a refused position gets them and the reset at once).
    if (event.event !== 'reset' && (event.event !== 'comment' || event.last)) yield { kind: 'opened', epoch: served };
    switch (event.event) {
      case 'record':
        yield { kind: 'record', record: JSON.parse(event.data) as LogRecord<T> };
        break;
      case 'snapshot-end': {
        const end = JSON.parse(event.data) as { offset: number; epoch: string; digest?: string; gen?: string };
        yield { kind: 'snapshot-end', ...end };
        break;
      }
      case 'progress': {
        const { offset, gen } = JSON.parse(event.data) as { offset: number; gen?: string };
        yield { kind: 'progress', offset, ...(gen === undefined ? {} : { gen }) };
        break;
      }
      case 'reset':
        throw resetError(event.data);
    }
  }
}

/** Worth trying again: no answer, a server failing or overloaded. Not 4xx, which the same request gets again. */
export function retriable(err: StatelogError): boolean {
  return err.isConnectionError || err.status >= 500 || err.status === 429;
}

function lostStream(url: string, err: unknown, connection: AbortSignal): StatelogError {
  if (connection.aborted) {
    const reason = connection.reason instanceof Error ? connection.reason.message : 'aborted';
    return new StatelogError(0, 'timeout', `the stream from ${url} went silent: ${reason}`, { url });
  }
  const { code, text } = describeCause(err);
  return new StatelogError(0, 'unreachable', `lost the stream from ${url}: ${text}`, { url, ...(code ? { cause: code } : {}) }, { cause: err });
}

function resetError(data: string): StatelogError {
  const { error } = JSON.parse(data) as { error: { code: string; message: string } & Record<string, unknown> };
  const { code, message, ...details } = error;
  return new StatelogError(410, code, message, details);
}
