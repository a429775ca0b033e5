// The app's life beside its requests: the compactor and the expirer run once the app is
// ready, expired idempotency answers are purged, and shutdown ends streams and silent connections
// before the services close.
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type { Services } from '../services.js';
import { trackConnections } from './silent-connections.js';

export const lifecycle = fp(async (app: FastifyInstance, { services }: { services: Services }) => {
  const { config, store, compactor, expirer } = services;

  // A client may half-close its side once its request is sent (shutdown(SHUT_WR)): its
  // answer must still come, however long the write's fsync, the long poll or the
  // compaction takes. By default Node aborts such a request and ends the connection at
  // the client's FIN; with this (undocumented but kept: nodejs/node#36819) it answers,
  // then ends it.
  (app.server as typeof app.server & { httpAllowHalfOpen: boolean }).httpAllowHalfOpen = true;
  const connections = trackConnections(app.server);

  let purge: NodeJS.Timeout | undefined;
  app.addHook('onReady', async () => {
    compactor.start();
    expirer.start();
    purge = setInterval(
      () => void store.purgeIdempotency(Date.now()).catch((err) => app.log.error({ err }, 'idempotency purge failed')),
      Math.min(config.idempotencyTtlMs, 60_000),
    ).unref();
  });
  app.addHook('preClose', async () => {
    services.beginShutdown();
    connections.closeSilent();
  });
  app.addHook('onClose', async () => {
    clearInterval(purge);
    await services.close();
  });
});
