// GET /v1/snapshot: every live key at one offset, as NDJSON, sent from a shared spool at the client's
// pace; a spool that fails after the answer started cuts the stream, so its trailer is missing.
// With `minOffset`, any state at that offset or later will do, and caches may keep the answer.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { checkEpoch, checkReader } from '../feed/change-feed.js';
import { cacheScope, freshFor, heldOffset, stateTag } from '../http/caching.js';
import { pullStream } from '../http/pull-stream.js';
import { requestFilter } from '../http/scope.js';
import { SocketBuffers } from '../http/socket-buffers.js';
import { snapshotSchema } from '../contract/schemas.js';
import type { Config } from '../config.js';
import type { Lifecycle } from '../http/lifecycle.js';
import type { Metrics } from '../metrics.js';
import type { SharedSnapshots } from '../snapshot/shared-snapshots.js';
import type { SpooledSnapshot } from '../snapshot/snapshot-spool.js';
import { servedGeneration } from '../contract/lineage.js';
import type { LogStore } from '../store/log-store.js';

/** Chunks sent from the spool: one fits the stream's 64 KiB buffer, and a buffer is reused long after its bytes left. */
const SEND_BYTES = 64 * 1024;
const SEND_BUFFERS = 8;

/** The generation to follow the snapshot's offset under (`gen` on GET /v1/changes), where one is shown. */
const generationOf = (reader: SpooledSnapshot): string | undefined => (reader.lineage === undefined ? undefined : servedGeneration(reader.lineage, reader.offset));

/** The last line: without it a client knows the stream was cut short. */
function trailer(reader: SpooledSnapshot): string {
  const shown = generationOf(reader);
  const gen = shown === undefined ? '' : `,"gen":"${shown}"`;
  return `{"end":true,"offset":${reader.offset},"count":${reader.count},"epoch":${JSON.stringify(reader.epoch)}${gen},"digest":"${reader.digestHex()}"}\n`;
}

export interface SnapshotRouteOptions {
  store: LogStore;
  snapshots: Pick<SharedSnapshots, 'open'>;
  lifecycle: Lifecycle;
  metrics: Metrics;
  config: Pick<Config, 'tokens' | 'tokensFile' | 'snapshotMaxAgeSeconds' | 'stalledReaderMs'>;
}

export const snapshotRoutes: FastifyPluginAsyncTypebox<SnapshotRouteOptions> = async (app, { store, snapshots, lifecycle, metrics, config }) => {
  const scope = cacheScope(config);

  app.get('/v1/snapshot', { schema: snapshotSchema, config: { scope: 'filter' } }, async (req, reply) => {
    // A token with key prefixes is shown its keys only: the count and digest are of those.
    const filter = requestFilter(req, req.query.prefix);
    checkEpoch(req.query.epoch, store.epoch);
    // The database's head: another node may have acknowledged a write a moment ago.
    const position = await store.readPosition();
    const cacheable = req.query.minOffset !== undefined;
    checkReader(req.query.minOffset ?? position.head, { head: position.head, horizon: 0 });
    // A state below the compaction horizon cannot be followed by its changes: none will do.
    const minOffset = Math.max(req.query.minOffset ?? position.head, position.horizon);
    const cacheControl = cacheable ? freshFor(scope, config.snapshotMaxAgeSeconds) : 'no-store';

    // A client that holds a state this request accepts needs none.
    const held = heldOffset(req.headers['if-none-match'], store.epoch);
    if (held !== null && held >= minOffset && held <= position.head) {
      metrics.snapshotServed('not_modified');
      return reply.code(304).headers({ etag: stateTag(store.epoch, held), 'cache-control': cacheControl }).send();
    }

    const { reader, shared } = await snapshots.open({ filter, shape: 'entry', minOffset });
    metrics.snapshotServed(shared ? 'shared' : 'read');

    const closed = metrics.openStream('snapshot', req.raw);
    let ended = false;
    // Shutdown cuts a snapshot short: without its last line the client knows it is incomplete.
    const cut = (): void => void reply.raw.destroy();
    lifecycle.shutdown.addEventListener('abort', cut, { once: true });

    const buffers = new SocketBuffers(req.raw.socket, SEND_BUFFERS, SEND_BYTES);
    const stream = pullStream(
      async () => {
        if (ended) return null;
        // The spooled bytes as they are: one file read and one socket write a chunk.
        const bytes = await reader.readInto(buffers.next());
        if (bytes > 0) return buffers.sent(bytes);
        ended = true;
        return trailer(reader);
      },
      () => {
        lifecycle.shutdown.removeEventListener('abort', cut);
        reader.close();
        closed();
      },
      { stalled: { socket: req.raw.socket, ms: config.stalledReaderMs, cut } },
    );
    const generation = generationOf(reader);
    return reply
      .type('application/x-ndjson; charset=utf-8')
      .headers({
        'x-log-offset': String(reader.offset),
        'x-log-epoch': reader.epoch,
        ...(generation === undefined ? {} : { 'x-log-generation': generation }),
        etag: stateTag(reader.epoch, reader.offset),
        'cache-control': cacheControl,
      })
      .send(stream);
  });
};
