// GET /v1/snapshot: every live key at one offset, as NDJSON. The snapshot is spooled
// (feed/snapshot-spool.ts) and its bytes are sent from the spool as fast as the client
// reads and no faster, with the trailer after them. The answer starts before the spool
// is complete: a spool that fails after that (no room, a database error, shutdown) cuts
// the stream, so the trailer is missing, as the contract tells clients to expect.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { showsEverything } from '../contract/key-scope.js';
import { pullStream } from '../http/pull-stream.js';
import { requestFilter } from '../http/scope.js';
import { SocketBuffers } from '../http/socket-buffers.js';
import { snapshotSchema } from '../contract/schemas.js';
import type { AppServices } from '../services.js';
import type { SnapshotSlots } from '../feed/snapshot-slots.js';
import type { SpooledSnapshot } from '../feed/snapshot-spool.js';

/**
 * Chunks sent from the spool: few enough bytes each that the stream's buffer (64 KiB)
 * holds one, and enough buffers that one is used again only long after its bytes left.
 */
const SEND_BYTES = 64 * 1024;
const SEND_BUFFERS = 8;

/** The last line: without it a client knows the stream was cut short. */
function trailer(reader: SpooledSnapshot): string {
  return `{"end":true,"offset":${reader.offset},"count":${reader.count},"epoch":${JSON.stringify(reader.epoch)},"digest":"${reader.digestHex()}"}\n`;
}

export interface SnapshotRouteOptions {
  services: AppServices;
  slots: SnapshotSlots;
}

export const snapshotRoutes: FastifyPluginAsyncTypebox<SnapshotRouteOptions> = async (app, { services, slots }) => {
  const { store, lifecycle, metrics, config } = services;

  app.get('/v1/snapshot', { schema: snapshotSchema, config: { scope: 'filter' } }, async (req, reply) => {
    // A token with key prefixes is shown its keys only: the count and digest are of those.
    const filter = requestFilter(req, req.query.prefix);
    const { prefix, within } = filter;
    const spool = { signal: lifecycle.shutdown, digest: { whole: showsEverything(filter) }, ...(within ? { within } : {}) };
    const { reader, release } = await slots.open(store, prefix, 'entry', spool);

    const closed = metrics.openStream('snapshot', req.raw);
    let ended = false;
    // Shutdown cuts a snapshot short: without its last line the client knows it is incomplete.
    const cut = (): void => void reply.raw.destroy();
    lifecycle.shutdown.addEventListener('abort', cut, { once: true });

    const buffers = new SocketBuffers(req.raw.socket, SEND_BUFFERS, SEND_BYTES);
    const stream = pullStream(
      async () => {
        if (ended) return null;
        // The spooled bytes as they are: one file read and one socket write a chunk,
        // however many lines it holds.
        const bytes = await reader.readInto(buffers.next());
        if (bytes > 0) return buffers.sent(bytes);
        ended = true;
        return trailer(reader);
      },
      () => {
        lifecycle.shutdown.removeEventListener('abort', cut);
        reader.close();
        release();
        closed();
      },
      { stalled: { socket: req.raw.socket, ms: config.stalledReaderMs, cut } },
    );
    return reply
      .type('application/x-ndjson; charset=utf-8')
      .headers({ 'x-log-offset': String(reader.offset), 'x-log-epoch': reader.epoch, 'cache-control': 'no-store' })
      .send(stream);
  });
};
