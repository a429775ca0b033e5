// The app's connections beside its requests: answers still go to half-closed sockets,
// and shutdown ends streams and silent connections before the services close.
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { trackConnections } from './silent-connections.js';

export interface Lifecycle {
  /** Set when shutdown begins: readiness fails, long polls and streams end. */
  closing: boolean;
  readonly shutdown: AbortSignal;
}

export const lifecycle = fp(async (app: FastifyInstance, { beginShutdown }: { beginShutdown: () => void }) => {
  // A client that half-closes once its request is sent still gets its answer: Node would abort it at
  // the FIN (this option is undocumented but kept: nodejs/node#36819).
  (app.server as typeof app.server & { httpAllowHalfOpen: boolean }).httpAllowHalfOpen = true;
  const connections = trackConnections(app.server);

  app.addHook('preClose', async () => {
    beginShutdown();
    connections.closeSilent();
  });
});
