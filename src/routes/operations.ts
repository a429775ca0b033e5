// Stats and health: what dashboards and operators read.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { ApiError } from '../errors.js';
import { healthSchema, statsSchema, type LastCompaction, type Static } from '../schemas.js';
import type { AppServices } from '../services.js';

export interface OperationsOptions {
  services: AppServices;
  /** The last compaction run's summary, or null if none ran since start. */
  lastCompaction: () => Static<typeof LastCompaction> | null;
}

export const operationsRoutes: FastifyPluginAsyncTypebox<OperationsOptions> = async (app, options) => {
  const { store, lifecycle } = options.services;

  app.get('/v1/stats', { schema: statsSchema }, async () => {
    const counters = await store.counters();
    const superseded = counters.records - counters.liveKeys - counters.tombstones;
    return {
      ...counters,
      dirtyRatio: counters.records === 0 ? 0 : superseded / counters.records,
      lastCompaction: options.lastCompaction(),
    };
  });

  app.get('/healthz', { schema: healthSchema }, async () => ({ status: 'ok' }));

  app.get('/readyz', { schema: healthSchema }, async () => {
    if (lifecycle.closing) throw new ApiError('unavailable', 'shutting down');
    try {
      await store.ping();
    } catch {
      throw new ApiError('unavailable', 'the database is not usable');
    }
    return { status: 'ready' };
  });
};
