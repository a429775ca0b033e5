// GET /v1/changes/stream: the change feed as Server-Sent Events, optionally after a snapshot.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { checkEpoch, checkReader } from '../feed/change-feed.js';
import { ChangeStreamSource, resetBody, type ChangeStreamEvent } from '../feed/change-stream-source.js';
import { ApiError } from '../contract/errors.js';
import { servedGeneration, parseGenerationToken } from '../contract/lineage.js';
import type { ReadFilter } from '../contract/key-scope.js';
import { recordJson } from '../contract/render.js';
import { pullStream } from '../http/pull-stream.js';
import { requestLifetime } from '../http/request-lifetime.js';
import { requestFilter, watchScope } from '../http/scope.js';
import type { Authenticator } from '../http/auth.js';
import { changeStreamSchema } from '../contract/schemas.js';
import type { Config } from '../config.js';
import type { ChangeNotifier } from '../feed/change-notifier.js';
import type { TailWindow } from '../feed/tail-window.js';
import type { WatcherSlots } from '../feed/watcher-slots.js';
import type { Lifecycle } from '../http/lifecycle.js';
import type { Metrics } from '../metrics.js';
import type { SharedSnapshots } from '../snapshot/shared-snapshots.js';
import type { StoreFaults } from '../store/store-errors.js';
import { parseLastEventId, sseComment, sseEvent, sseRetry } from '../http/sse.js';
import { TailPages, type SharedPagesBudget } from '../feed/tail-pages.js';
import { OneKeySnapshot } from '../snapshot/one-key-snapshot.js';
import type { LogStore, SnapshotReader, StoredRecord } from '../store/log-store.js';

/** How long a stream ended by shutdown waits for its reader to read the end and close. */
const STOPPED_READER_MS = 1000;
const RETRY_MS = 1000;
const STREAM_OPENING = sseRetry(RETRY_MS) + sseComment('statelog change stream');

/** A page's records as events with ids: bytes, so that the streams sharing the page write one buffer. */
function recordEvents(records: StoredRecord[]): Buffer {
  let text = '';
  for (const record of records) text += sseEvent('record', recordJson(record), record.offset);
  return Buffer.from(text);
}

function frame(event: ChangeStreamEvent<Buffer>): string | Buffer {
  switch (event.type) {
    case 'open':
      return STREAM_OPENING;
    case 'snapshot-records':
      // No id: a reconnect in the middle of a snapshot must start it again, not resume.
      return event.lines.map((line) => sseEvent('record', line)).join('');
    case 'snapshot-end': {
      const gen = event.gen === undefined ? '' : `,"gen":"${event.gen}"`;
      const data = `{"offset":${event.offset},"epoch":${JSON.stringify(event.epoch)}${gen},"digest":"${event.digest}"}`;
      return sseEvent('snapshot-end', data, event.offset);
    }
    case 'records':
      return event.progress === undefined ? event.page : Buffer.concat([event.page, Buffer.from(progressEvent(event.progress, event.gen))]);
    case 'progress':
      return progressEvent(event.offset, event.gen);
    case 'reset':
      return sseEvent('reset', JSON.stringify(event.body));
  }
}

function progressEvent(offset: number, gen?: string): string {
  return sseEvent('progress', gen === undefined ? `{"offset":${offset}}` : `{"offset":${offset},"gen":"${gen}"}`, offset);
}

/** The snapshot a stream starts with, at least as new as the head: of the prefix, or of the one key (the first of its prefix). */
async function openSnapshot(snapshots: Pick<SharedSnapshots, 'open'>, store: LogStore, filter: ReadFilter): Promise<SnapshotReader> {
  const minOffset = (await store.readPosition()).head;
  if (filter.key === undefined) return (await snapshots.open({ filter, shape: 'record', minOffset })).reader;
  const { reader } = await snapshots.open({ filter: { prefix: filter.key }, shape: 'record', minOffset });
  return new OneKeySnapshot(reader, filter.key);
}

export interface ChangeStreamRouteOptions {
  store: LogStore;
  notifier: ChangeNotifier;
  tailWindow: TailWindow;
  watchers: WatcherSlots;
  snapshots: Pick<SharedSnapshots, 'open'>;
  lifecycle: Lifecycle;
  metrics: Metrics;
  faults: StoreFaults;
  config: Pick<Config, 'stalledReaderMs'>;
  /** The credentials in force (null: auth off): open streams are checked again at each reload. */
  auth: Authenticator | null;
  sharedPages: SharedPagesBudget;
}

export const changeStreamRoutes: FastifyPluginAsyncTypebox<ChangeStreamRouteOptions> = async (app, options) => {
  const { store, notifier, tailWindow, watchers, snapshots, lifecycle, metrics, faults, config, auth, sharedPages } = options;
  const tail = new TailPages(store, tailWindow, recordEvents, { budget: sharedPages });

  app.get('/v1/changes/stream', { schema: changeStreamSchema, config: { scope: 'filter' } }, async (req, reply) => {
    const filter = requestFilter(req, req.query.prefix, req.query.key);
    // A reconnecting EventSource repeats its URL: Last-Event-ID overrides `after` and `snapshot=true`.
    const resume = parseLastEventId(req.headers['last-event-id']);
    const withSnapshot = req.query.snapshot && resume === undefined;
    if (withSnapshot && req.query.after !== undefined) {
      throw new ApiError('invalid_request', 'snapshot=true starts at the snapshot\'s own offset: give no "after"');
    }
    const after = resume ?? req.query.after ?? 0;
    const gen = req.query.gen === undefined ? undefined : parseGenerationToken(req.query.gen)!;
    try {
      // An EventSource opened with snapshot=true resumes by repeating that URL, which names no epoch: its
      // offset may be of a log since restored, whose records after it are others. It starts over instead.
      if (resume !== undefined && req.query.snapshot && req.query.epoch === undefined) {
        throw new ApiError('epoch_changed', 'a stream opened with snapshot=true resumes only with its epoch in the URL (the offset alone may be of a log since restored); take a new snapshot', { epoch: store.epoch });
      }
      checkEpoch(req.query.epoch, store.epoch);
      // Against the database's head and horizon (another node may have acknowledged `after` a moment
      // ago), which also answers 503 before the stream opens if the database cannot be reached.
      if (!withSnapshot) checkReader(after, await store.readPosition(), gen);
    } catch (err) {
      // An EventSource sees a 410 as a bare error and reconnects for ever: the reason goes in-band.
      if (!(err instanceof ApiError) || err.statusCode !== 410) throw err;
      const body = resetBody(err, (await store.readPosition()).horizon, store.epoch);
      return reply
        .type('text/event-stream; charset=utf-8')
        .headers({ 'cache-control': 'no-store', 'x-accel-buffering': 'no', 'x-log-epoch': store.epoch })
        .send(STREAM_OPENING + frame({ type: 'reset', body }));
    }

    const release = watchers.acquireFor(req);
    const opening = withSnapshot ? openSnapshot(snapshots, store, filter) : null;
    const snapshot = await opening?.catch((err: unknown) => {
      release();
      throw err;
    });

    const lifetime = requestLifetime(reply, lifecycle.shutdown);
    const closed = metrics.openStream('sse', req.raw);
    const lineage = snapshot?.lineage;
    const servedUnder = snapshot ? (lineage === undefined ? undefined : servedGeneration(lineage, snapshot.offset)) : req.query.gen;
    const source = new ChangeStreamSource({ tail, notifier, ...filter, epoch: store.epoch, gen: servedUnder, after, snapshot: snapshot ?? null, signal: lifetime.signal });
    // Revoked by a reload, it ends with a reset; narrowed, it shows the new scope from the next record on.
    const unwatch = watchScope(auth, req, { prefix: req.query.prefix, key: req.query.key }, filter, (change) => source.rescope(change));
    const socket = req.raw.socket;
    // A stream ended by shutdown must leave no idle keep-alive connection (server.close() waits for
    // it): a reader not draining is cut at once, one that stopped reading a moment later.
    const onShutdown = (): void => {
      if (reply.raw.writableNeedDrain) return void reply.raw.destroy();
      reply.raw.once('finish', () => socket.end());
      setTimeout(() => socket.destroy(), STOPPED_READER_MS).unref();
    };
    lifecycle.shutdown.addEventListener('abort', onShutdown, { once: true });

    const stream = pullStream(
      () =>
        source.next().then(
          (event) => event && frame(event),
          (err: unknown) => {
            // Cut, never ended cleanly; a corrupt database also fails readiness from now on.
            faults.observe(err);
            throw err;
          },
        ),
      () => {
        lifecycle.shutdown.removeEventListener('abort', onShutdown);
        lifetime.dispose();
        unwatch();
        source.close();
        closed();
        release();
      },
      { stalled: { socket: req.raw.socket, ms: config.stalledReaderMs, cut: () => void reply.raw.destroy() } },
    );
    return reply
      .type('text/event-stream; charset=utf-8')
      .headers({ 'cache-control': 'no-store', 'x-accel-buffering': 'no', 'x-log-epoch': store.epoch })
      .send(stream);
  });
};
