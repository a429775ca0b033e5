// What every request goes through, whatever its route: its id, the refusal during
// shutdown, CORS, load shedding, auth, its metrics and its one access-log line.
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { LogController, type FastifyInstance, type FastifyReply, type FastifyRequest, type FastifyServerOptions } from 'fastify';
import cors from '@fastify/cors';
import fp from 'fastify-plugin';
import { ApiError } from '../contract/errors.js';
import type { Config } from '../config.js';
import type { Metrics } from '../metrics.js';
import type { Lifecycle } from './lifecycle.js';
import { Authenticator } from './auth.js';
import { errorHandler } from './error-handler.js';
import { overloadCheck } from './overload.js';
import { enforceScopes } from './scope.js';

const REQUEST_ID = /^[\x21-\x7e]{1,128}$/;

/** The caller's X-Request-Id when it is a sane token, else a new one. */
export function requestId(req: IncomingMessage): string {
  const given = req.headers['x-request-id'];
  return typeof given === 'string' && REQUEST_ID.test(given) ? given : randomUUID();
}

/**
 * Routes that machines poll: health checks, scrapes, and the dashboard's page and its
 * stats every 2 s. Their successful answers are logged at debug, or they would drown the rest.
 */
const POLLED_ROUTES = new Set(['/healthz', '/readyz', '/metrics', '/v1/stats', '/ui', '/ui/', '/ui/:file']);

/**
 * What is kept of each request when it completes: its count and time in the metrics, and
 * one access-log line instead of fastify's two. Fastify calls it for every answered
 * request, so no onResponse hook is needed for either.
 */
export class AccessLog extends LogController {
  /** Where requests are counted: set once the services are open (the request pipeline). */
  metrics: Metrics | null = null;

  override incomingRequest(): void {}

  override requestCompleted(err: Error | null, req: FastifyRequest, reply: FastifyReply): void {
    // routeOptions builds a new object at each read: read once.
    const route = req.routeOptions.url;
    const ms = reply.elapsedTime;
    // The token entry's name, never its secret: who did what.
    const name = req.tokenEntry?.name;
    this.metrics?.observeRequest(req.method, route, reply.statusCode, ms, req.raw, name);
    const line: { method: string; url: string; status: number; ms: number; name?: string } = { method: req.method, url: req.url, status: reply.statusCode, ms };
    if (name !== undefined) line.name = name;
    if (err) reply.log.error({ ...line, err }, 'request failed');
    else if (reply.statusCode < 400 && POLLED_ROUTES.has(route ?? '')) reply.log.debug(line, 'request');
    else reply.log.info(line, 'request');
  }
}

/** The auth of these settings, or null when no tokens are set (every route open). */
export function authenticator(config: Config): Authenticator | null {
  if (!config.tokens && !config.tokensFile) return null;
  return new Authenticator(config.tokens, config.tokensFile?.entries ?? [], { clientCertificates: config.tls?.clientCa != null });
}

/**
 * Malformed percent-encoding or an over-long key in the path: answered by the router
 * before any hook runs, so request id, auth, metrics and the access log apply here.
 */
export function frameworkErrors(auth: Authenticator | null, accessLog: AccessLog): NonNullable<FastifyServerOptions['frameworkErrors']> {
  return (err, req, reply) => {
    reply.header('x-request-id', req.id);
    // No route and no start time here: counted under the unmatched route, in 0 ms.
    reply.raw.once('finish', () => accessLog.requestCompleted(null, req, reply));
    const refused = auth?.check(req);
    if (refused) return errorHandler(refused, req, reply);
    const code = req.url.startsWith('/v1/keys/') ? 'invalid_key' : 'invalid_request';
    const message =
      err.code === 'FST_ERR_MAX_PARAM_LENGTH'
        ? 'a key in the path is at most 512 bytes'
        : 'the path is not valid percent-encoded UTF-8';
    return errorHandler(new ApiError(code, message), req, reply);
  };
}

/**
 * The headers a browser page on an allowed origin may send and read. Exposed: what the
 * API answers with beyond the CORS-safelisted ones (offsets as ETag, the snapshot's
 * position, Retry-After on 429 and 503, the request id).
 */
export const CORS_HEADERS = {
  allowed: ['authorization', 'content-type', 'if-match', 'if-none-match', 'idempotency-key', 'last-event-id', 'x-request-id'],
  exposed: ['etag', 'x-log-offset', 'x-log-epoch', 'retry-after', 'x-request-id', 'idempotent-replayed', 'www-authenticate', 'link'],
};

export interface RequestPipelineOptions {
  config: Config;
  lifecycle: Lifecycle;
  metrics: Metrics;
  auth: Authenticator | null;
  accessLog: AccessLog;
}

/** A check every request passes: its refusal, or null. */
type Check = (req: FastifyRequest) => ApiError | null;

/**
 * One onRequest hook (a callback: these run on every request) that sets the request id
 * on the answer when asked to, then runs `checks` in order; the first refusal answers.
 */
function checksHook(checks: Check[], setsRequestId: boolean) {
  return (req: FastifyRequest, reply: FastifyReply, done: (err?: Error) => void): void => {
    if (setsRequestId) reply.header('x-request-id', req.id);
    for (const check of checks) {
      const refused = check(req);
      if (refused) return done(refused);
    }
    done();
  };
}

/**
 * The hooks, at the root so that they apply to every route (fastify-plugin). The checks
 * share one onRequest hook unless CORS must run between them: each hook is one more
 * pass through fastify's hook runner on every request.
 */
export const requestPipeline = fp(async (app: FastifyInstance, { config, lifecycle, metrics, auth, accessLog }: RequestPipelineOptions) => {
  accessLog.metrics = metrics;
  enforceScopes(app);
  // Liveness holds while the process runs, shutdown included.
  const closing: Check = (req) =>
    lifecycle.closing && req.routeOptions.url !== '/healthz'
      ? new ApiError('unavailable', 'the server is shutting down', {}, { 'retry-after': '1' })
      : null;
  const overloaded = overloadCheck(app, config);
  // Also runs for paths that match no route, so an unknown /v1 path is refused with
  // 401 or 403 before anyone learns that it does not exist.
  const afterCors = [overloaded, auth && ((req: FastifyRequest) => auth.check(req))].filter((check): check is Check => !!check);
  if (config.corsOrigins) {
    // Before CORS, the request id: a preflight is answered by the CORS hook itself.
    app.addHook('onRequest', checksHook([closing], true));
    // Before auth: a preflight carries no token and is answered here, and every answer,
    // a refusal included, carries the CORS headers the page needs to read it.
    await app.register(cors, {
      origin: config.corsOrigins[0] === '*' ? '*' : config.corsOrigins,
      methods: ['GET', 'HEAD', 'PUT', 'POST', 'DELETE'],
      allowedHeaders: CORS_HEADERS.allowed,
      exposedHeaders: CORS_HEADERS.exposed,
      maxAge: 600,
    });
    if (afterCors.length > 0) app.addHook('onRequest', checksHook(afterCors, false));
  } else {
    app.addHook('onRequest', checksHook([closing, ...afterCors], true));
  }
  app.addHook('onSend', (_req, reply, payload, done) => {
    // Idle connections are closed when shutdown starts; one whose request was in
    // flight then must not be kept alive after its answer, or close() waits for it.
    if (lifecycle.closing) reply.header('connection', 'close');
    done(null, payload);
  });
});
