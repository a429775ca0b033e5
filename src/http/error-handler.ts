// Where errors become answers: every status >= 400 carries the contract's body, never a stack trace.
import { STATUS_CODES as HTTP_REASONS } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { ApiError, databaseUnavailable, outcomeUnknown, type ErrorCode } from '../contract/errors.js';
import { ReaderGone } from '../feed/read-turns.js';
import { storeErrorKind, type StoreErrorKind } from '../store/store-errors.js';

const FASTIFY_CODES: Record<string, ErrorCode> = {
  FST_ERR_CTP_INVALID_JSON_BODY: 'invalid_json',
  FST_ERR_CTP_EMPTY_JSON_BODY: 'invalid_json',
  FST_ERR_CTP_BODY_TOO_LARGE: 'payload_too_large',
  FST_ERR_CTP_INVALID_MEDIA_TYPE: 'unsupported_media_type',
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: 'invalid_request',
  FST_ERR_VALIDATION: 'invalid_request',
  FST_ERR_BAD_URL: 'invalid_request',
  FST_ERR_ASYNC_CONSTRAINT: 'invalid_request',
};

const STATUS_CODES: Record<number, ErrorCode> = {
  400: 'invalid_request',
  404: 'not_found',
  413: 'payload_too_large',
  415: 'unsupported_media_type',
  429: 'too_many_requests',
  503: 'unavailable',
};

// Only our own errors and fastify's carry messages written for clients; any other may carry SQL,
// paths or internals, and its text never reaches the body.
const GENERIC_MESSAGES: Partial<Record<ErrorCode, string>> = {
  invalid_request: 'the request is not valid',
  not_found: 'not found',
  payload_too_large: 'the body is too large',
  unsupported_media_type: 'send a JSON body with Content-Type: application/json',
  too_many_requests: 'too many requests; retry later',
  unavailable: 'the service is unavailable; retry later',
};

const STORE_ANSWERS: Record<StoreErrorKind, { answer: () => ApiError; level: 'error' | 'warn'; log: string }> = {
  // Corruption is no outage to wait out: the client is told of an internal error.
  corrupt: {
    answer: () => new ApiError('internal', 'internal error'),
    level: 'error',
    log: 'the database is corrupt: the request failed; restore the file from a backup',
  },
  no_space: {
    answer: () => databaseUnavailable('the database has no room to write; retry later'),
    level: 'warn',
    log: 'the database has no room to write',
  },
  unavailable: { answer: () => databaseUnavailable(), level: 'warn', log: 'the database is unavailable' },
  busy: { answer: () => databaseUnavailable(), level: 'warn', log: 'the database is unavailable' },
  outcome_unknown: { answer: () => outcomeUnknown(), level: 'warn', log: 'a commit was not confirmed durable' },
};

export function toApiError(err: FastifyError | Error): ApiError {
  if (err instanceof ApiError) return err;
  const kind = storeErrorKind(err);
  if (kind) return STORE_ANSWERS[kind].answer();
  if (err instanceof ReaderGone) return new ApiError('unavailable', err.message);
  const fastifyError = err as FastifyError;
  if (fastifyError.validation) return new ApiError('invalid_request', fastifyError.message);
  const status = fastifyError.statusCode ?? 500;
  const fromFastify = typeof fastifyError.code === 'string' && fastifyError.code.startsWith('FST_');
  const code = (fromFastify && FASTIFY_CODES[fastifyError.code]) || STATUS_CODES[status];
  if (code) return new ApiError(code, fromFastify ? fastifyError.message : GENERIC_MESSAGES[code] ?? 'the request was refused');
  // A client error without a code of its own is still the client's, never a 5xx.
  if (status >= 400 && status < 500) return new ApiError('invalid_request', 'the request was refused');
  return new ApiError('internal', 'internal error');
}

// A reset while the request was read is the client's error, not the database's: only the socket tells
// (a database connection resetting under it fails with the same codes).
function isClientAbort(err: Error & { code?: unknown }, request: FastifyRequest): boolean {
  const socket = request.raw.socket as Socket | null;
  return (err.code === 'ECONNRESET' || err.code === 'ECONNABORTED' || err.message === 'aborted') && (socket === null || socket.destroyed);
}

export function errorHandler(err: FastifyError | Error, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  if (!(err instanceof ApiError) && isClientAbort(err, request)) {
    request.log.info({ err: { message: err.message, code: (err as { code?: unknown }).code } }, 'the client aborted the request');
    return reply.code(400).send(new ApiError('invalid_request', 'the request was not received whole').toBody());
  }
  const apiError = toApiError(err);
  const kind = storeErrorKind(err);
  if (kind) {
    const { level, log } = STORE_ANSWERS[kind];
    // An outage is not a bug: its cause (which address, which SQLSTATE) without a stack.
    request.log[level](level === 'error' ? { err } : { err: { message: err.message, code: (err as { code?: unknown }).code } }, log);
  } else if (apiError.statusCode >= 500 && apiError.code !== 'unavailable') {
    request.log.error({ err }, 'request failed');
  }
  return reply.code(apiError.statusCode).headers(apiError.headers).send(apiError.toBody());
}

const KEY_METHODS = new Set(['GET', 'HEAD', 'PUT', 'DELETE']);

export function notFoundHandler(request: FastifyRequest, reply: FastifyReply): FastifyReply {
  // The router gives up on a key path with a raw '/' or an over-long key: a bad key, not a missing route.
  if (KEY_METHODS.has(request.method) && request.url.startsWith('/v1/keys/')) {
    const message = 'a key in the path is percent-encoded (/ as %2F) and at most 512 bytes';
    return errorHandler(new ApiError('invalid_key', message), request, reply);
  }
  return errorHandler(new ApiError('not_found', `no route ${request.method} ${request.url.split('?', 1)[0]}`), request, reply);
}

/** Requests Node's HTTP parser refuses never reach fastify: answered on the socket, with the contract's body. */
export function clientErrorHandler(err: Error & { code?: string }, socket: Socket): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  const [status, message] =
    err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
      ? [408, 'the request was not received in time']
      : err.code === 'HPE_HEADER_OVERFLOW'
        ? [431, 'the request headers are too large']
        : [400, 'the request is not valid HTTP/1.1'];
  const body = JSON.stringify(new ApiError('invalid_request', message).toBody());
  if (socket.writable) {
    socket.write(
      `HTTP/1.1 ${status} ${HTTP_REASONS[status]}\r\nContent-Type: application/json; charset=utf-8\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy();
}
