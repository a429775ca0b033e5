// Load shedding: while the event loop is saturated, new requests are answered at once
// with 503 `unavailable` and Retry-After instead of queueing without bound behind the
// work already accepted. @fastify/under-pressure measures the mean event-loop delay
// every sample interval; its answer is replaced by the contract's error body.
import underPressure from '@fastify/under-pressure';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Config } from '../config.js';
import { ApiError } from '../contract/errors.js';

/**
 * Still answered under load: liveness (a slow process is not a dead one, and restarting
 * it would lose the work in flight) and metrics (an operator needs to see the overload).
 * /readyz is refused like any other route: readiness is how a balancer sheds traffic.
 */
const EXEMPT_ROUTES: ReadonlySet<string> = new Set(['/healthz', '/metrics']);

export function overloadRetryAfterSeconds(config: Config): number {
  // The load is measured again after one sample interval: retrying sooner is pointless.
  return Math.max(1, Math.ceil(config.loadSampleIntervalMs / 1000));
}

export async function registerOverload(app: FastifyInstance, config: Config): Promise<void> {
  if (config.maxEventLoopDelayMs === 0) return;
  const retryAfter = String(overloadRetryAfterSeconds(config));
  await app.register(underPressure, {
    maxEventLoopDelay: config.maxEventLoopDelayMs,
    sampleInterval: config.loadSampleIntervalMs,
    // A rejected promise goes to the error handler, which writes the contract's body.
    pressureHandler: async (req: FastifyRequest) => {
      if (req.routeOptions.url !== undefined && EXEMPT_ROUTES.has(req.routeOptions.url)) return;
      throw new ApiError('unavailable', 'the server is overloaded; retry later', {}, { 'retry-after': retryAfter });
    },
  });
}
