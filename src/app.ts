// Builds the statelog HTTP app, never listening: server.ts and the tests both use this factory.
import Fastify, { type FastifyInstance, type FastifyServerOptions, type FastifyTypeProviderDefault, type RouteOptions } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { Config } from './config.js';
import type { Authenticator } from './http/auth.js';
import { clientErrorHandler } from './http/error-handler.js';
import { lifecycle } from './http/lifecycle.js';
import { parsing } from './http/parsing.js';
import { AccessLog, authenticator, frameworkErrors, requestId, requestPipeline } from './http/request-pipeline.js';
import { consumerRoutes } from './routes/consumers.js';
import { adminRoutes } from './routes/admin.js';
import { changeStreamRoutes } from './routes/change-stream.js';
import { changesRoutes } from './routes/changes.js';
import { keyRoutes } from './routes/keys.js';
import { operationsRoutes } from './routes/operations.js';
import { recordRoutes } from './routes/records.js';
import { snapshotRoutes } from './routes/snapshot.js';
import { uiRoutes } from './routes/ui.js';
import { openServices, StartupError, type Services, type ServicesOptions } from './services.js';

export { CORS_HEADERS } from './http/request-pipeline.js';

declare module 'fastify' {
  interface FastifyInstance {
    services: Services;
    /** The tokens in force (server.ts reloads them on SIGHUP); null with auth off. */
    authenticator: Authenticator | null;
  }
}

export type App = FastifyInstance;

// Node's request timeouts cover receiving a request only, never answering it; nothing may move on a
// connection for connectionTimeout, above a healthy answer's longest silence (docs/design.md, Overload).
export const SERVER_TIMEOUTS = {
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 30_000,
  // Longer than load balancers' usual 60 s idle timeout, so that the balancer closes first.
  keepAliveTimeoutMs: 72_000,
  connectionTimeoutMs: 120_000,
  // Node's default, 30 s, would let a slow sender hold a connection up to 30 s past them.
  checkIntervalMs: 5_000,
} as const;

export function loggerOptions(config: Config): FastifyServerOptions['logger'] {
  return {
    level: config.logLevel,
    // The token never reaches a log line. Paths, not '*.headers': a wildcard walks every line's whole object.
    redact: {
      paths: ['headers.authorization', 'req.headers.authorization', 'request.headers.authorization'],
      censor: '[redacted]',
    },
    ...(process.stdout.isTTY ? { transport: { target: 'pino-pretty' } } : {}),
  };
}

/** HTTP, or HTTPS with the certificate server.ts replaces on SIGHUP; a handshake gets as long as a sender's headers. */
function serverOptions(config: Config) {
  const http = {
    headersTimeout: SERVER_TIMEOUTS.headersTimeoutMs,
    connectionsCheckingInterval: SERVER_TIMEOUTS.checkIntervalMs,
  };
  if (!config.tls) return { http };
  const { cert, key, clientCa } = config.tls;
  // With a client CA, the handshake refuses a client without a certificate it signed.
  const clients = clientCa ? { ca: clientCa, requestCert: true, rejectUnauthorized: true } : {};
  return { https: { ...http, cert, key, ...clients, handshakeTimeout: SERVER_TIMEOUTS.headersTimeoutMs } };
}

export interface BuildOptions extends ServicesOptions {
  /** Told of every route as it is registered (the tests list them). */
  onRoute?: (route: RouteOptions) => void;
}

export async function buildApp(config: Config, options: BuildOptions = {}): Promise<App> {
  const auth = authenticator(config);
  const accessLog = new AccessLog();
  const app = Fastify({
    logger: loggerOptions(config),
    genReqId: requestId,
    logController: accessLog,
    frameworkErrors: frameworkErrors(auth, accessLog),
    clientErrorHandler,
    bodyLimit: config.maxValueBytes + 64 * 1024,
    // The request pipeline's own 503 carries the contract's error body.
    return503OnClosing: false,
    keepAliveTimeout: SERVER_TIMEOUTS.keepAliveTimeoutMs,
    requestTimeout: SERVER_TIMEOUTS.requestTimeoutMs,
    connectionTimeout: SERVER_TIMEOUTS.connectionTimeoutMs,
    ...serverOptions(config),
    // The client's address (watcher shares, the access log) is the forwarded one only from a trusted proxy.
    ...(config.trustedProxies.length > 0 ? { trustProxy: config.trustedProxies } : {}),
    // Keys are up to 512 bytes, percent-encoded up to three characters a byte.
    routerOptions: { maxParamLength: 2048 },
  }).withTypeProvider<TypeBoxTypeProvider>();

  if (options.onRoute) app.addHook('onRoute', options.onRoute);
  const services = await openServices(config, app.log, options);
  try {
    app.decorate('services', services);
    app.decorate('authenticator', auth);
    // The services' own work starts once the app is ready, and they close with it.
    app.addHook('onReady', async () => services.start());
    app.addHook('onClose', () => services.close());
    await app.register(lifecycle, { beginShutdown: services.beginShutdown });
    await app.register(parsing, { faults: services.faults });
    const { store, batcher, metrics, faults, compactor, snapshots, notifier, tailWindow, watchers, sharedPages } = services;
    await app.register(requestPipeline, { config, lifecycle: services.lifecycle, metrics, auth, accessLog });
    await app.register(keyRoutes, { store, batcher, config });
    await app.register(recordRoutes, { batcher, config });
    await app.register(adminRoutes, { compactor, faults });
    await app.register(consumerRoutes, { store });
    const lastCompaction = () => compactor.lastCompaction;
    await app.register(operationsRoutes, { store, config, lifecycle: services.lifecycle, metrics, faults, snapshots, lastCompaction });
    await app.register(snapshotRoutes, { store, snapshots, lifecycle: services.lifecycle, metrics, config });
    await app.register(changesRoutes, { store, notifier, tailWindow, watchers, lifecycle: services.lifecycle, metrics, config, auth, sharedPages });
    await app.register(changeStreamRoutes, { store, notifier, tailWindow, watchers, snapshots, lifecycle: services.lifecycle, metrics, faults, config, auth, sharedPages });
    await app.register(uiRoutes);
  } catch (err) {
    await app.close().catch(() => {});
    await services.close().catch(() => {});
    throw new StartupError('cannot set up the HTTP app', err);
  }
  return app.withTypeProvider<FastifyTypeProviderDefault>();
}
