// Stats and health: what dashboards and operators read.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { ApiError, databaseUnavailable } from '../contract/errors.js';
import { healthSchema, metricsSchema, statsSchema, type LastCompaction, type Static } from '../contract/schemas.js';
import type { Config } from '../config.js';
import type { Lifecycle } from '../http/lifecycle.js';
import type { Metrics } from '../metrics.js';
import type { LogStore } from '../store/log-store.js';
import { dirtyRatio } from '../store/log-store.js';
import { storeErrorKind, type StoreFaults } from '../store/store-errors.js';
import { batchBodyLimit } from './records.js';
import type { SharedSnapshots } from '../snapshot/shared-snapshots.js';

export interface OperationsOptions {
  store: LogStore;
  config: Pick<Config, 'maxValueBytes'>;
  lifecycle: Lifecycle;
  metrics: Metrics;
  faults: StoreFaults;
  /** The snapshots: readiness fails while their spool folder cannot be written. */
  snapshots: Pick<SharedSnapshots, 'checkFolder'>;
  /** The last compaction run's summary, or null if none ran since start. */
  lastCompaction: () => Static<typeof LastCompaction> | null;
}

/** How long /readyz lets the ping of a probed store take before answering what the probe knows. */
const READINESS_PING_BUDGET_MS = 50;

/** The store's ping, or nothing once `ms` have passed (its failure after that is dropped). */
async function pingWithin(store: LogStore, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const ping = store.ping();
  ping.catch(() => {});
  try {
    await Promise.race([ping, new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)))]);
  } finally {
    clearTimeout(timer);
  }
}

export const operationsRoutes: FastifyPluginAsyncTypebox<OperationsOptions> = async (app, options) => {
  const { store, lifecycle, metrics, faults, config } = options;

  app.get('/v1/stats', { schema: statsSchema, config: { scope: 'unscoped' } }, async () => {
    const counters = await store.counters();
    return {
      ...counters,
      digestOffset: counters.head,
      dirtyRatio: dirtyRatio(counters),
      lastCompaction: options.lastCompaction(),
      // What a client must know to send only what this server accepts (a restore checks it first).
      maxValueBytes: config.maxValueBytes,
      maxBatchBytes: batchBodyLimit(config.maxValueBytes),
    };
  });

  app.get('/healthz', { schema: healthSchema, config: { scope: 'open' } }, async () => ({ status: 'ok' }));

  app.get('/readyz', { schema: healthSchema, config: { scope: 'open' } }, async () => {
    if (lifecycle.closing) throw new ApiError('unavailable', 'shutting down');
    const corrupt = (reason: string): ApiError =>
      new ApiError('unavailable', `the database is corrupt (${reason}); restore it from a backup`, { reason: 'corrupt' }, { 'retry-after': '60' });
    if (faults.corrupt) throw corrupt(faults.corrupt);
    const readiness = store.readiness?.();
    if (readiness && !readiness.ready) throw databaseUnavailable(readiness.message, { reason: readiness.reason });
    try {
      // A store with a background probe has answered already; its ping may only add a fault
      // it meets at once (a connection that waits on a dead database is the probe's to report).
      if (readiness) await pingWithin(store, READINESS_PING_BUDGET_MS);
      else await store.ping();
    } catch (err) {
      if (faults.observe(err)) throw corrupt(faults.corrupt!);
      if (storeErrorKind(err) === 'no_space') {
        throw databaseUnavailable('writes fail: the database has no room to write', { reason: 'no_space' });
      }
      throw databaseUnavailable('the database is not usable', { reason: 'unavailable' });
    }
    // The snapshots' spool folder: readiness fails while it cannot be written.
    await options.snapshots.checkFolder();
    return { status: 'ready' };
  });

  app.get('/metrics', { schema: metricsSchema, config: { scope: 'unscoped' } }, async (_req, reply) => {
    const text = await metrics.exposition();
    return reply.type(metrics.contentType).send(text);
  });
};
