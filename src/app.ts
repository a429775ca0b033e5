// Builds the statelog HTTP app: a factory that opens the store and wires the services
// and routes together, but never listens. server.ts and the tests both use it.
import { randomUUID } from 'node:crypto';
import { isUtf8 } from 'node:buffer';
import { Ajv } from 'ajv';
import Fastify, {
  LogController,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
  type FastifyServerOptions,
} from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import secureJson from 'secure-json-parse';
import type { Config } from './config.js';
import { ChangeNotifier } from './change-notifier.js';
import { ApiError } from './errors.js';
import { errorHandler, notFoundHandler } from './error-handler.js';
import { keyRoutes } from './routes/keys.js';
import { operationsRoutes } from './routes/operations.js';
import { recordRoutes } from './routes/records.js';
import type { AppServices, Lifecycle } from './services.js';
import { openStore } from './store/open-store.js';
import { WriteBatcher } from './write-batcher.js';

export type App = FastifyInstance & { services: AppServices };

const REQUEST_ID = /^[\x21-\x7e]{1,128}$/;

export function loggerOptions(config: Config): FastifyServerOptions['logger'] {
  return {
    level: config.logLevel,
    redact: { paths: ['req.headers.authorization'], censor: '[redacted]' },
    // Pretty logs only for a person at a terminal; JSON lines everywhere else.
    ...(process.stdout.isTTY ? { transport: { target: 'pino-pretty' } } : {}),
  };
}

/** One access-log line per request, when it completes, instead of fastify's two. */
class AccessLog extends LogController {
  override incomingRequest(): void {}

  override requestCompleted(err: Error | null, req: FastifyRequest, reply: FastifyReply): void {
    const line = { method: req.method, url: req.url, status: reply.statusCode, ms: reply.elapsedTime };
    if (err) reply.log.error({ ...line, err }, 'request failed');
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
  try {
    done(null, secureJson.parse(body.toString('utf8'), undefined, { protoAction: 'error', constructorAction: 'error' }));
  } catch (err) {
    const message = err instanceof SyntaxError ? err.message : 'the body is not valid JSON';
    done(new ApiError('invalid_json', message));
  }
}

export async function buildApp(config: Config): Promise<App> {
  const store = await openStore(config);
  const notifier = new ChangeNotifier();
  notifier.publish(store.position().head);
  const batcher = new WriteBatcher(store, { onCommit: (head) => notifier.publish(head) });
  const shutdown = new AbortController();
  const lifecycle: Lifecycle = { closing: false, shutdown: shutdown.signal };
  const services: AppServices = { config, store, batcher, notifier, lifecycle };

  const app = Fastify({
    logger: loggerOptions(config),
    genReqId: (req) => {
      const given = req.headers['x-request-id'];
      return typeof given === 'string' && REQUEST_ID.test(given) ? given : randomUUID();
    },
    bodyLimit: config.maxValueBytes + 64 * 1024,
    // Our own 503 (below) carries the contract's error body.
    return503OnClosing: false,
    keepAliveTimeout: 72_000,
    requestTimeout: 30_000,
    // Keys are up to 512 bytes, percent-encoded up to three characters a byte.
    routerOptions: { maxParamLength: 2048 },
    logController: new AccessLog(),
    // Malformed percent-encoding in the path: answered with the contract's body.
    frameworkErrors: (err, req, reply) => {
      const code = req.url.startsWith('/v1/keys/') ? 'invalid_key' : 'invalid_request';
      return errorHandler(new ApiError(code, `the path is not valid percent-encoded UTF-8`), req, reply);
    },
  }).withTypeProvider<TypeBoxTypeProvider>();

  // Commits of other nodes sharing the database wake this node's readers too.
  const unwatch = store.watchHead(
    (head) => notifier.publish(head),
    (err) => app.log.warn({ err }, 'watching the database for other nodes\' commits was interrupted; it resumes by itself'),
  );

  app.setValidatorCompiler(validatorCompiler());
  app.setErrorHandler(errorHandler);
  app.setNotFoundHandler(notFoundHandler);
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, parseJsonBody);

  app.addHook('onRequest', async () => {
    if (lifecycle.closing) throw new ApiError('unavailable', 'the server is shutting down', {}, { 'retry-after': '1' });
  });
  app.addHook('onSend', async (req, reply) => {
    reply.header('x-request-id', req.id);
    // Idle connections are closed when shutdown starts; one whose request was in
    // flight then must not be kept alive after its answer, or close() waits for it.
    if (lifecycle.closing) reply.header('connection', 'close');
  });

  await app.register(keyRoutes, { services });
  await app.register(recordRoutes, { services });
  await app.register(operationsRoutes, { services, lastCompaction: () => null });

  const purge = setInterval(
    () => void store.purgeIdempotency(Date.now()).catch((err) => app.log.error({ err }, 'idempotency purge failed')),
    Math.min(config.idempotencyTtlMs, 60_000),
  ).unref();

  app.addHook('preClose', async () => {
    lifecycle.closing = true;
    shutdown.abort();
  });
  app.addHook('onClose', async () => {
    clearInterval(purge);
    unwatch();
    await batcher.drain();
    await store.close();
  });

  return Object.assign(app, { services }) as unknown as App;
}
