// GET /v1/snapshot: every live key at one offset, as NDJSON, streamed page by page from
// a read transaction on its own connection, as fast as the client reads and no faster.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { checkPrefix } from '../contract/key-rules.js';
import { pullStream } from '../http/pull-stream.js';
import { snapshotSchema } from '../contract/schemas.js';
import type { AppServices } from '../services.js';
import type { SnapshotSlots } from '../feed/snapshot-slots.js';
import { SnapshotDigest } from '../feed/snapshot-digest.js';
import type { SnapshotReader } from '../store/log-store.js';

/**
 * Rows and characters per page. A page becomes one string; kept well under V8's 128 KiB
 * large-object threshold it is allocated and freed in the young generation, which
 * measured faster and leaner (bench/snapshot.ts) than pages two to eight times larger.
 */
const PAGE_ROWS = 1000;
const PAGE_CHARS = 64 * 1024;

/** The last line: without it a client knows the stream was cut short. */
function trailer(reader: SnapshotReader, count: number, digest: SnapshotDigest): string {
  return `{"end":true,"offset":${reader.offset},"count":${count},"epoch":${JSON.stringify(reader.epoch)},"digest":"${digest.hex()}"}\n`;
}

export interface SnapshotRouteOptions {
  services: AppServices;
  slots: SnapshotSlots;
}

export const snapshotRoutes: FastifyPluginAsyncTypebox<SnapshotRouteOptions> = async (app, { services, slots }) => {
  const { store, lifecycle, metrics, config } = services;

  app.get('/v1/snapshot', { schema: snapshotSchema }, async (req, reply) => {
    const prefix = checkPrefix(req.query.prefix);
    const { reader, release } = await slots.open(store, prefix, 'entry', lifecycle.shutdown);

    const closed = metrics.openStream('snapshot', req.raw);
    let count = 0;
    let ended = false;
    const digest = new SnapshotDigest(reader, prefix === '');
    // Shutdown cuts a snapshot short: without its last line the client knows it is incomplete.
    const cut = (): void => void reply.raw.destroy();
    lifecycle.shutdown.addEventListener('abort', cut, { once: true });

    const stream = pullStream(
      async () => {
        if (ended) return null;
        const lines = await reader.nextJson('entry', PAGE_ROWS, PAGE_CHARS);
        if (lines.length === 0) {
          ended = true;
          return trailer(reader, count, digest);
        }
        count += lines.length;
        digest.add(lines);
        // One string a page: one write to the socket.
        return `${lines.join('\n')}\n`;
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
