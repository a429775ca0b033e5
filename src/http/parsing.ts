// How requests are read and refused: schema validation, JSON bodies only, and the one error handler.
import { isUtf8 } from 'node:buffer';
import { Ajv } from 'ajv';
import fastJsonStringify from 'fast-json-stringify';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import secureJson from 'secure-json-parse';
import { ApiError } from '../contract/errors.js';
import type { StoreFaults } from '../store/store-errors.js';
import { decodedBody } from './content-encoding.js';
import { errorHandler, notFoundHandler } from './error-handler.js';
import { checkExactBodySize, exactNumbers } from './exact-numbers.js';

// Compiled once a process, not once an app: the route schemas are module constants and no
// shared schema is added, so an app built again (a test file builds dozens) reuses them.
const AJV_OPTIONS = { useDefaults: true, removeAdditional: false, allErrors: false, strict: false } as const;
/** Bodies are checked strictly (no coercion, extra members refused); query strings and params are coerced from text. */
const bodies = new Ajv({ ...AJV_OPTIONS, coerceTypes: false });
const urls = new Ajv({ ...AJV_OPTIONS, coerceTypes: 'array' });
// Ajv keeps what it compiled by schema object.
const compileValidator = ({ schema, httpPart }: { schema: object; httpPart?: string }) =>
  (httpPart === 'body' ? bodies : urls).compile(schema);

const serializers = new WeakMap<object, (data: unknown) => string>();
function compileSerializer({ schema }: { schema: object }): (data: unknown) => string {
  let serialize = serializers.get(schema);
  if (!serialize) {
    serialize = fastJsonStringify(schema);
    serializers.set(schema, serialize);
  }
  return serialize;
}

/** JSON bodies only: valid UTF-8, valid JSON, no prototype poisoning. */
function parseJsonBody(req: FastifyRequest, body: Buffer, done: (err: Error | null, value?: unknown) => void): void {
  if (body.length === 0) return done(new ApiError('invalid_json', 'the body is empty'));
  if (!isUtf8(body)) return done(new ApiError('invalid_json', 'the body is not valid UTF-8'));
  let parsed: unknown;
  const text = body.toString('utf8');
  try {
    checkExactBodySize(text, body.length);
  } catch (err) {
    return done(err as Error);
  }
  try {
    parsed = secureJson.parse(text, undefined, { protoAction: 'error', constructorAction: 'error' });
  } catch (err) {
    const message = err instanceof SyntaxError ? err.message : 'the body is not valid JSON';
    return done(new ApiError('invalid_json', message));
  }
  try {
    req.exactBody = exactNumbers(text, parsed);
  } catch (err) {
    return done(err as Error);
  }
  done(null, parsed);
}

export const parsing = fp(async (app: FastifyInstance, { faults }: { faults: StoreFaults }) => {
  app.setValidatorCompiler(compileValidator);
  app.setSerializerCompiler(compileSerializer);
  // Present on every request from the start (fastify's advice), a body or not.
  app.decorateRequest('exactBody', undefined);
  app.setErrorHandler((err: Error, req, reply) => {
    faults.observe(err);
    return errorHandler(err, req, reply);
  });
  app.setNotFoundHandler(notFoundHandler);
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, parseJsonBody);
  app.addHook('preParsing', (req, _reply, payload, done) => {
    // Most bodies are not encoded: only those look up the route's limit (a new routeOptions object at each read).
    if (req.headers['content-encoding'] === undefined) return done(null, payload);
    try {
      done(null, decodedBody(req, payload, req.routeOptions.bodyLimit ?? app.initialConfig.bodyLimit!));
    } catch (err) {
      done(err as Error);
    }
  });
});
