// Load shedding: while the event loop is saturated, requests get 503 at once instead of queueing without
// bound. The delay is sampled each interval, and the pipeline's one hook reads a flag.
import { monitorEventLoopDelay } from 'node:perf_hooks';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Config } from '../config.js';
import { ApiError } from '../contract/errors.js';

// Still answered under load: liveness (a slow process is not a dead one) and metrics (the operator must
// see the overload). /readyz is refused: readiness is how a balancer sheds traffic.
const EXEMPT_ROUTES: ReadonlySet<string> = new Set(['/healthz', '/metrics']);

/** The delay histogram's timer resolution: its own lateness, taken off the mean. */
const RESOLUTION_MS = 10;

export function overloadRetryAfterSeconds(config: Config): number {
  // The load is measured again after one sample interval: retrying sooner is pointless.
  return Math.max(1, Math.ceil(config.loadSampleIntervalMs / 1000));
}

/** The refusal of a request while the loop is saturated, or null; null when shedding is off. */
export type OverloadCheck = (req: FastifyRequest) => ApiError | null;

export function overloadCheck(app: FastifyInstance, config: Config): OverloadCheck | null {
  if (config.maxEventLoopDelayMs === 0) return null;
  const retryAfter = String(overloadRetryAfterSeconds(config));
  const histogram = monitorEventLoopDelay({ resolution: RESOLUTION_MS });
  histogram.enable();
  let saturated = false;
  const sampler = setInterval(
    () => {
      // No sample at all in an interval (a NaN mean): the loop was blocked throughout.
      const delayMs = histogram.mean / 1e6 - RESOLUTION_MS;
      saturated = Number.isNaN(delayMs) || delayMs > config.maxEventLoopDelayMs;
      histogram.reset();
    },
    Math.max(RESOLUTION_MS, config.loadSampleIntervalMs),
  ).unref();
  app.addHook('onClose', async () => {
    clearInterval(sampler);
    histogram.disable();
  });
  return (req) => {
    if (!saturated || EXEMPT_ROUTES.has(req.routeOptions.url ?? '')) return null;
    return new ApiError('unavailable', 'the server is overloaded; retry later', {}, { 'retry-after': retryAfter });
  };
}
