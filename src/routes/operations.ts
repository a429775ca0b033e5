// Stats and health: what dashboards and operators read.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { ApiError, databaseUnavailable } from '../contract/errors.js';
import { healthSchema, metricsSchema, statsSchema, type LastCompaction, type Static } from '../contract/schemas.js';
import type { AppServices } from '../services.js';
import { dirtyRatio } from '../store/log-store.js';

export interface OperationsOptions {
  services: AppServices;
  /** The last compaction run's summary, or null if none ran since start. */
  lastCompaction: () => Static<typeof LastCompaction> | null;
}

export const operationsRoutes: FastifyPluginAsyncTypebox<OperationsOptions> = async (app, options) => {
  const { store, lifecycle, metrics } = options.services;

  app.get('/v1/stats', { schema: statsSchema }, async () => {
    const counters = await store.counters();
    return {
      ...counters,
      dirtyRatio: dirtyRatio(counters),
      lastCompaction: options.lastCompaction(),
    };
  });

  app.get('/healthz', { schema: healthSchema }, async () => ({ status: 'ok' }));

  app.get('/readyz', { schema: healthSchema }, async () => {
    if (lifecycle.closing) throw new ApiError('unavailable', 'shutting down');
    try {
      await store.ping();
    } catch {
      throw databaseUnavailable('the database is not usable');
    }
    return { status: 'ready' };
  });

  app.get('/metrics', { schema: metricsSchema }, async (_req, reply) => {
    const text = await metrics.exposition();
    return reply.type(metrics.contentType).send(text);
  });
};
