// Builds the statelog HTTP app: a factory that opens the store and wires the services
// and routes together, but never listens. server.ts and the tests both use it.
import { randomUUID } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import { isUtf8 } from 'node:buffer';
import { mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, resolve } from 'node:path';
import { Ajv } from 'ajv';
import Fastify, {
  LogController,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
  type FastifyServerOptions,
} from 'fastify';
import cors from '@fastify/cors';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import secureJson from 'secure-json-parse';
import { Authenticator } from './http/auth.js';
import type { Config } from './config.js';
import { ChangeNotifier } from './feed/change-notifier.js';
import { Compactor, compactionSettings } from './compaction/compactor.js';
import { ApiError } from './contract/errors.js';
import { clientErrorHandler, errorHandler, notFoundHandler } from './http/error-handler.js';
import { Metrics } from './metrics.js';
import { registerOverload } from './http/overload.js';
import { decodedBody } from './http/content-encoding.js';
import { changeStreamRoutes } from './routes/change-stream.js';
import { changesRoutes } from './routes/changes.js';
import { adminRoutes } from './routes/admin.js';
import { keyRoutes } from './routes/keys.js';
import { operationsRoutes } from './routes/operations.js';
import { recordRoutes } from './routes/records.js';
import { snapshotRoutes } from './routes/snapshot.js';
import { uiRoutes } from './routes/ui.js';
import type { AppServices, Lifecycle } from './services.js';
import { trackConnections } from './http/silent-connections.js';
import { SnapshotSlots } from './feed/snapshot-slots.js';
import { SpoolBudget } from './feed/snapshot-spool.js';
import { WatcherSlots } from './feed/watcher-slots.js';
import { openStore } from './store/open-store.js';
import { StoreFaults } from './store/unavailable.js';
import { WriteBatcher } from './writes/write-batcher.js';
import { keepExactNumbers } from './writes/exact-numbers.js';

/** A registered route: its method and URL pattern as given to fastify (`/v1/keys/:key`). */
export interface RouteEntry {
  method: string;
  url: string;
}

/** The app, its services, and every route it registered (HEAD routes included). */
export type App = FastifyInstance & { services: AppServices; compactor: Compactor; routeTable: readonly RouteEntry[] };

const REQUEST_ID = /^[\x21-\x7e]{1,128}$/;

/**
 * Server timeouts. Node's requestTimeout and headersTimeout only cover *receiving* a
 * request (slow senders), never the time to answer it, so long polls, SSE streams and
 * snapshots are not cut by them. The socket inactivity timeout (connectionTimeout) ends
 * a connection on which nothing moved either way for that long: it must stay above the
 * longest silence of a healthy answer (a long poll waits up to 60 s; streams send
 * progress every 15 s), and it ends streams to readers that stopped reading.
 */
export const SERVER_TIMEOUTS = {
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 30_000,
  // Longer than the usual 60 s idle timeout of load balancers in front, so the balancer
  // closes first and never sends on a connection the server is closing.
  keepAliveTimeoutMs: 72_000,
  connectionTimeoutMs: 120_000,
  // How often Node checks the two timeouts above (its default, 30 s, would let a slow
  // sender hold a connection up to 30 s past them).
  checkIntervalMs: 5_000,
} as const;

export function loggerOptions(config: Config): FastifyServerOptions['logger'] {
  return {
    level: config.logLevel,
    // Wherever a request's headers end up in a log line, the token does not. Paths are
    // listed, not matched by '*.headers': a wildcard makes every line (and every request's
    // child logger) walk the object, about 4 µs a request at LOG_LEVEL=info.
    redact: {
      paths: ['headers.authorization', 'req.headers.authorization', 'request.headers.authorization'],
      censor: '[redacted]',
    },
    // Pretty logs only for a person at a terminal; JSON lines everywhere else.
    ...(process.stdout.isTTY ? { transport: { target: 'pino-pretty' } } : {}),
  };
}

/**
 * Routes that machines poll: health checks, scrapes, and the dashboard's page and its
 * stats every 2 s. Their successful answers are logged at debug, or they would drown the rest.
 */
const POLLED_ROUTES = new Set(['/healthz', '/readyz', '/metrics', '/v1/stats', '/ui', '/ui/', '/ui/:file']);

/** One access-log line per request, when it completes, instead of fastify's two. */
class AccessLog extends LogController {
  override incomingRequest(): void {}

  override requestCompleted(err: Error | null, req: FastifyRequest, reply: FastifyReply): void {
    const line = { method: req.method, url: req.url, status: reply.statusCode, ms: reply.elapsedTime };
    if (err) reply.log.error({ ...line, err }, 'request failed');
    else if (reply.statusCode < 400 && POLLED_ROUTES.has(req.routeOptions.url ?? '')) reply.log.debug(line, 'request');
    else reply.log.info(line, 'request');
  }
}

/**
 * Validation: request bodies are checked strictly (no coercion, extra members refused),
 * query strings and params are coerced from text ("10" → 10).
 */
function validatorCompiler() {
  const options = { useDefaults: true, removeAdditional: false, allErrors: false, strict: false } as const;
  const bodies = new Ajv({ ...options, coerceTypes: false });
  const urls = new Ajv({ ...options, coerceTypes: 'array' });
  return ({ schema, httpPart }: { schema: object; httpPart?: string }) =>
    (httpPart === 'body' ? bodies : urls).compile(schema);
}

/** JSON bodies only: valid UTF-8, valid JSON, no prototype poisoning. */
function parseJsonBody(_req: unknown, body: Buffer, done: (err: Error | null, value?: unknown) => void): void {
  if (body.length === 0) return done(new ApiError('invalid_json', 'the body is empty'));
  if (!isUtf8(body)) return done(new ApiError('invalid_json', 'the body is not valid UTF-8'));
  let parsed: unknown;
  const text = body.toString('utf8');
  try {
    parsed = secureJson.parse(text, undefined, { protoAction: 'error', constructorAction: 'error' });
  } catch (err) {
    const message = err instanceof SyntaxError ? err.message : 'the body is not valid JSON';
    return done(new ApiError('invalid_json', message));
  }
  try {
    keepExactNumbers(text, parsed);
  } catch (err) {
    return done(err as Error);
  }
  done(null, parsed);
}

/**
 * Node's server options: HTTP, or HTTPS with the configured certificate (server.ts
 * replaces it on SIGHUP). A TLS connection that never finishes its handshake is given
 * as long as a slow sender's headers.
 */
function serverOptions(config: Config) {
  const http = {
    headersTimeout: SERVER_TIMEOUTS.headersTimeoutMs,
    connectionsCheckingInterval: SERVER_TIMEOUTS.checkIntervalMs,
  };
  if (!config.tls) return { http };
  const { cert, key } = config.tls;
  return { https: { ...http, cert, key, handshakeTimeout: SERVER_TIMEOUTS.headersTimeoutMs } };
}

/**
 * The headers a browser page on an allowed origin may send and read. Exposed: what the
 * API answers with beyond the CORS-safelisted ones (offsets as ETag, the snapshot's
 * position, Retry-After on 429 and 503, the request id).
 */
export const CORS_HEADERS = {
  allowed: ['authorization', 'content-type', 'if-match', 'if-none-match', 'idempotency-key', 'last-event-id', 'x-request-id'],
  exposed: ['etag', 'x-log-offset', 'x-log-epoch', 'retry-after', 'x-request-id', 'idempotent-replayed', 'www-authenticate'],
};

export interface BuildOptions {
  /**
   * A failed fsync: nothing more can be promised durable (the kernel may have dropped
   * the pages), so the process must stop; by default the app stops serving writes.
   */
  onFatal?: (err: Error) => void;
}

export async function buildApp(config: Config, options: BuildOptions = {}): Promise<App> {
  /** Logs a fatal error once the app's logger exists. */
  let logFatal: (err: Error) => void = () => {};
  const store = await openStore(config, {
    onFatal: (err) => {
      logFatal(err);
      options.onFatal?.(err);
    },
  });
  const notifier = new ChangeNotifier();
  notifier.publish(store.position().head);
  const metrics = new Metrics(store);
  const batcher = new WriteBatcher(store, {
    onCommit: (head, records) => {
      notifier.publish(head);
      metrics.recordsWritten(records);
    },
    onDurable: (elapsedMs) => metrics.groupCommitted(elapsedMs),
  });
  const shutdown = new AbortController();
  // Every open stream and long poll listens for shutdown: no leak at any count.
  setMaxListeners(0, shutdown.signal);
  const lifecycle: Lifecycle = { closing: false, shutdown: shutdown.signal };
  const faults = new StoreFaults();
  const watchers = new WatcherSlots(config.maxWatchers);
  const services: AppServices = { config, store, batcher, notifier, lifecycle, metrics, watchers, faults };
  const auth = config.tokens && new Authenticator(config.tokens);
  const accessLog = new AccessLog();

  const app = Fastify({
    logger: loggerOptions(config),
    genReqId: (req) => {
      const given = req.headers['x-request-id'];
      return typeof given === 'string' && REQUEST_ID.test(given) ? given : randomUUID();
    },
    bodyLimit: config.maxValueBytes + 64 * 1024,
    // Our own 503 (below) carries the contract's error body.
    return503OnClosing: false,
    keepAliveTimeout: SERVER_TIMEOUTS.keepAliveTimeoutMs,
    requestTimeout: SERVER_TIMEOUTS.requestTimeoutMs,
    connectionTimeout: SERVER_TIMEOUTS.connectionTimeoutMs,
    ...serverOptions(config),
    // Keys are up to 512 bytes, percent-encoded up to three characters a byte.
    routerOptions: { maxParamLength: 2048 },
    logController: accessLog,
    clientErrorHandler,
    // Malformed percent-encoding or an over-long key in the path: the contract's body.
    frameworkErrors: (err, req, reply) => {
      // Answered by the router before any hook runs: request id, auth and metrics apply here too.
      reply.header('x-request-id', req.id);
      reply.raw.once('finish', () => {
        metrics.observeRequest(req.method, undefined, reply.statusCode, 0);
        accessLog.requestCompleted(null, req, reply);
      });
      const refused = auth?.check(req);
      if (refused) return errorHandler(refused, req, reply);
      const code = req.url.startsWith('/v1/keys/') ? 'invalid_key' : 'invalid_request';
      const message =
        err.code === 'FST_ERR_MAX_PARAM_LENGTH'
          ? 'a key in the path is at most 512 bytes'
          : 'the path is not valid percent-encoded UTF-8';
      return errorHandler(new ApiError(code, message), req, reply);
    },
  }).withTypeProvider<TypeBoxTypeProvider>();
  logFatal = (err) => app.log.fatal({ err }, 'an fsync failed: nothing more can be promised durable; the process stops');

  // Commits of other nodes sharing the database wake this node's readers too.
  const unwatch = store.watchHead(
    (head) => notifier.publish(head),
    (err) => app.log.warn({ err }, 'watching the database for other nodes\' commits was interrupted; it resumes by itself'),
  );

  app.setValidatorCompiler(validatorCompiler());
  app.setErrorHandler((err: Error, req, reply) => {
    faults.observe(err);
    return errorHandler(err, req, reply);
  });
  app.setNotFoundHandler(notFoundHandler);
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, parseJsonBody);
  app.addHook('preParsing', (req, _reply, payload, done) => {
    try {
      done(null, decodedBody(req, payload, req.routeOptions.bodyLimit ?? app.initialConfig.bodyLimit!));
    } catch (err) {
      done(err as Error);
    }
  });

  // The hooks that run on every request take callbacks: cheaper than async functions on
  // the hottest path (bench/profile.ts).
  app.addHook('onRequest', (req, _reply, done) => {
    // Liveness holds while the process runs, shutdown included.
    if (lifecycle.closing && req.routeOptions.url !== '/healthz') {
      return done(new ApiError('unavailable', 'the server is shutting down', {}, { 'retry-after': '1' }));
    }
    done();
  });
  // Before auth: a preflight carries no token and is answered here, and every answer,
  // a refusal included, carries the CORS headers the page needs to read it.
  if (config.corsOrigins) {
    await app.register(cors, {
      origin: config.corsOrigins[0] === '*' ? '*' : config.corsOrigins,
      methods: ['GET', 'HEAD', 'PUT', 'POST', 'DELETE'],
      allowedHeaders: CORS_HEADERS.allowed,
      exposedHeaders: CORS_HEADERS.exposed,
      maxAge: 600,
    });
  }
  await registerOverload(app, config);
  // Also runs for paths that match no route, so an unknown /v1 path is refused with
  // 401 or 403 before anyone learns that it does not exist.
  if (auth) {
    app.addHook('onRequest', (req, _reply, done) => done(auth.check(req) ?? undefined));
  }
  app.addHook('onResponse', (req, reply, done) => {
    metrics.observeRequest(req.method, req.routeOptions.url, reply.statusCode, reply.elapsedTime, req.raw);
    done();
  });
  app.addHook('onSend', (req, reply, payload, done) => {
    reply.header('x-request-id', req.id);
    // Idle connections are closed when shutdown starts; one whose request was in
    // flight then must not be kept alive after its answer, or close() waits for it.
    if (lifecycle.closing) reply.header('connection', 'close');
    done(null, payload);
  });

  // Kept for checks such as test/openapi.test.ts (documented routes = registered routes).
  const routeTable: RouteEntry[] = [];
  app.addHook('onRoute', (route) => {
    for (const method of [route.method].flat()) routeTable.push({ method, url: route.url });
  });

  await app.register(keyRoutes, { services });
  await app.register(recordRoutes, { services });
  const compactor = new Compactor({
    ...compactionSettings(config),
    store,
    log: app.log.child({ module: 'compactor' }),
    signal: shutdown.signal,
  });
  metrics.watchCompaction(() => ({
    runs: compactor.runs,
    failures: compactor.failures,
    removed: compactor.removed,
    tombstonesRemoved: compactor.tombstonesRemoved,
    lastDurationMs: compactor.lastCompaction?.durationMs ?? 0,
    totalDurationMs: compactor.durationMsTotal,
    lastSuccessMs: compactor.lastCompaction && compactor.lastCompaction.startedAt + compactor.lastCompaction.durationMs,
  }));
  await app.register(adminRoutes, { compactor, faults });
  await app.register(operationsRoutes, { services, lastCompaction: () => compactor.lastCompaction });
  // Snapshots and snapshot=true streams share one limit.
  const spoolDir = config.spoolDir ?? (config.store === 'sqlite' ? dirname(resolve(config.dbPath)) : tmpdir());
  // Made now, so that a folder that cannot be made stops the start, not the first snapshot.
  mkdirSync(spoolDir, { recursive: true });
  const slots = new SnapshotSlots(config.maxSnapshots, { dir: spoolDir, budget: new SpoolBudget(config.spoolMaxBytes) });
  await app.register(snapshotRoutes, { services, slots });
  await app.register(changesRoutes, { services });
  await app.register(changeStreamRoutes, { services, slots });
  await app.register(uiRoutes);
  compactor.start();

  const purge = setInterval(
    () => void store.purgeIdempotency(Date.now()).catch((err) => app.log.error({ err }, 'idempotency purge failed')),
    Math.min(config.idempotencyTtlMs, 60_000),
  ).unref();

  // A client may half-close its side once its request is sent (shutdown(SHUT_WR)): its
  // answer must still come, however long the write's fsync, the long poll or the
  // compaction takes. By default Node aborts such a request and ends the connection at
  // the client's FIN; with this (undocumented but kept: nodejs/node#36819) it answers,
  // then ends it.
  (app.server as typeof app.server & { httpAllowHalfOpen: boolean }).httpAllowHalfOpen = true;
  const connections = trackConnections(app.server);
  app.addHook('preClose', async () => {
    lifecycle.closing = true;
    shutdown.abort();
    connections.closeSilent();
  });
  app.addHook('onClose', async () => {
    clearInterval(purge);
    // Shutdown already stopped it; this waits for a run in progress to end at a step boundary.
    await compactor.stop();
    unwatch();
    await batcher.drain();
    await store.close();
  });

  return Object.assign(app, { services, compactor, routeTable }) as unknown as App;
}
