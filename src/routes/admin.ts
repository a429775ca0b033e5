// /v1/admin: operations for the admin role. POST /v1/admin/compact runs a compaction
// now and answers when it is done.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { CompactionStopped, type Compactor } from '../compaction/compactor.js';
import { ApiError } from '../contract/errors.js';
import { compactSchema } from '../contract/schemas.js';
import type { StoreFaults } from '../store/store-errors.js';

export const adminRoutes: FastifyPluginAsyncTypebox<{ compactor: Compactor; faults: StoreFaults }> = async (app, { compactor, faults }) => {
  app.post('/v1/admin/compact', { schema: compactSchema, config: { scope: 'unscoped' } }, async (req) => {
    // A large run is silent for longer than the socket inactivity timeout
    // (connectionTimeout), which would end the connection before the answer: the
    // contract answers when the run is done, so the timeout waits until then.
    const socket = req.raw.socket;
    socket.setTimeout(0);
    try {
      const { removed, tombstonesRemoved, durationMs, horizon, head } = await compactor.run();
      return { removed, tombstonesRemoved, durationMs, horizon, head };
    } catch (err) {
      if (err instanceof CompactionStopped) {
        throw new ApiError('unavailable', 'the server is shutting down', {}, { 'retry-after': '1' });
      }
      // A corrupt database is no failure that the timer's retry mends: 500, logged as such.
      if (faults.observe(err)) throw err;
      // The cause is in the server's log; the client learns only that it may retry.
      throw new ApiError(
        'unavailable',
        'the compaction run failed; the steps it completed stand, and the timer retries it at the next period',
        {},
        { 'retry-after': '1' },
      );
    } finally {
      socket.setTimeout(app.server.timeout);
    }
  });
};
