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

/** Routes that machines poll: their successful answers are logged at debug, or they would drown the rest. */
const POLLED_ROUTES = new Set(['/healthz', '/readyz', '/metrics', '/v1/stats', '/v1/consumers', '/ui', '/ui/', '/ui/:file']);

/** Per answered request, its metrics and one access-log line instead of fastify's two: no onResponse hook needed. */
export class AccessLog extends LogController {
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

export function authenticator(config: Config): Authenticator | null {
  if (!config.tokens && !config.tokensFile) return null;
  return new Authenticator(config.tokens, config.tokensFile?.entries ?? [], { clientCertificates: config.tls?.clientCa != null });
}

/** Malformed paths are answered by the router before any hook: request id, auth, metrics and log apply here. */
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

/** What a page on an allowed origin may send and read: the API's own headers (ETag, Retry-After, ids) exposed. */
export const CORS_HEADERS = {
  allowed: ['authorization', 'content-type', 'if-match', 'if-none-match', 'idempotency-key', 'last-event-id', 'x-request-id'],
  exposed: ['etag', 'x-log-offset', 'x-log-epoch', 'x-log-generation', 'retry-after', 'x-request-id', 'idempotent-replayed', 'www-authenticate', 'link'],
};

export interface RequestPipelineOptions {
  config: Config;
  lifecycle: Lifecycle;
  metrics: Metrics;
  auth: Authenticator | null;
  accessLog: AccessLog;
}

type Check = (req: FastifyRequest) => ApiError | null;

/** One onRequest hook (every request pays each hook) that sets the request id, then runs `checks` to the first refusal. */
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

/** At the root, for every route; checks share one hook unless CORS must run between them. */
export const requestPipeline = fp(async (app: FastifyInstance, { config, lifecycle, metrics, auth, accessLog }: RequestPipelineOptions) => {
  accessLog.metrics = metrics;
  enforceScopes(app);
  // Liveness holds while the process runs, shutdown included.
  const closing: Check = (req) =>
    lifecycle.closing && req.routeOptions.url !== '/healthz'
      ? new ApiError('unavailable', 'the server is shutting down', {}, { 'retry-after': '1' })
      : null;
  const overloaded = overloadCheck(app, config);
  // Also for unmatched paths: an unknown /v1 path is refused before anyone learns it does not exist.
  const afterCors = [overloaded, auth && ((req: FastifyRequest) => auth.check(req))].filter((check): check is Check => !!check);
  if (config.corsOrigins) {
    // Before CORS, the request id: a preflight is answered by the CORS hook itself.
    app.addHook('onRequest', checksHook([closing], true));
    // Before auth: a preflight carries no token, and refusals carry the CORS headers a page needs to read them.
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
    // A connection whose request was in flight at shutdown is not kept alive, or close() waits for it.
    if (lifecycle.closing) reply.header('connection', 'close');
    done(null, payload);
  });
});
