// The app's connections beside its requests: answers still go to half-closed sockets,
// and shutdown ends streams and silent connections before the services close.
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { trackConnections } from './silent-connections.js';

export interface Lifecycle {
  /** Set when shutdown begins: readiness fails and long polls and streams end. */
  closing: boolean;
  /** Aborted when shutdown begins. */
  readonly shutdown: AbortSignal;
}

export const lifecycle = fp(async (app: FastifyInstance, { beginShutdown }: { beginShutdown: () => void }) => {
  // A client may half-close its side once its request is sent (shutdown(SHUT_WR)): its
  // answer must still come, however long the write's fsync, the long poll or the
  // compaction takes. By default Node aborts such a request and ends the connection at
  // the client's FIN; with this (undocumented but kept: nodejs/node#36819) it answers,
  // then ends it.
  (app.server as typeof app.server & { httpAllowHalfOpen: boolean }).httpAllowHalfOpen = true;
  const connections = trackConnections(app.server);

  app.addHook('preClose', async () => {
    beginShutdown();
    connections.closeSilent();
  });
});
