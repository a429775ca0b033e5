// The scope rule of every route (`config: { scope }`): which keys a request touches, so that a token
// with key prefixes is refused outside them; a route without a rule is refused to such tokens.
import type { FastifyInstance, FastifyRequest, preHandlerHookHandler } from 'fastify';
import { ApiError } from '../contract/errors.js';
import { coversFilter, inScope, outsideScope, readFilter, type ReadFilter, type ScopeChange } from '../contract/key-scope.js';
import type { TokenEntry } from '../token-file.js';
import type { Authenticator } from './auth.js';

/**
 * open, key (the `:key` parameter), batch (the body's keys), filter (requestFilter()), owned (names no
 * key: a token sees only what it made, such as its consumers), unscoped (tokens without prefixes).
 */
export type ScopeRule = 'open' | 'key' | 'batch' | 'filter' | 'owned' | 'unscoped';

export const SCOPE_RULES: readonly ScopeRule[] = ['open', 'key', 'batch', 'filter', 'owned', 'unscoped'];

declare module 'fastify' {
  interface FastifyContextConfig {
    scope?: ScopeRule;
  }
  interface FastifyRequest {
    /** The token entry the request was authenticated as; null with auth off or on an open route. */
    tokenEntry: TokenEntry | null;
  }
}

/** The refusal of an authenticated request by its route's rule, or null (batch and filter routes check later). */
export function routeScope(entry: TokenEntry, route: { url?: string | undefined; config?: { scope?: ScopeRule } }, request: FastifyRequest): ApiError | null {
  const prefixes = entry.prefixes;
  // An unmatched path reaches only the 404 handler, which reads nothing.
  if (prefixes === null || route.url === undefined) return null;
  switch (route.config?.scope) {
    case 'open':
    case 'filter':
    case 'batch':
    case 'owned':
      return null;
    case 'key': {
      const key = (request.params as { key?: string }).key;
      return key !== undefined && inScope(key, prefixes) ? null : outsideScope('the key', prefixes);
    }
    case 'unscoped':
      return new ApiError('forbidden', 'this needs a token without key prefixes', { prefixes });
    default:
      return new ApiError('forbidden', 'this route is open only to tokens without key prefixes', { prefixes });
  }
}

/** What a read route shows this request: its `prefix` (or `key`) within the token's prefixes. */
export function requestFilter(request: FastifyRequest, prefix: string, key?: string): ReadFilter {
  return readFilter(request.tokenEntry?.prefixes ?? null, prefix, key);
}

/** The request's credential checked against the set now in force, `shown` being what it is shown so far. */
function rescope(auth: Authenticator, request: FastifyRequest, asked: { prefix: string; key?: string | undefined }, shown: ReadFilter): ScopeChange | null {
  const refusal = auth.check(request);
  if (refusal) return { refused: refusal };
  let fresh: ReadFilter;
  try {
    fresh = requestFilter(request, asked.prefix, asked.key);
  } catch (err) {
    if (err instanceof ApiError) return { refused: err };
    throw err;
  }
  // Widened (or the same): what it is shown stays, as a mirror built from it stays whole.
  if (coversFilter(fresh, shown)) return null;
  const prefixes = request.tokenEntry?.prefixes ?? [];
  if (coversFilter(shown, fresh)) return { narrowed: fresh, prefixes };
  // Moved to other keys: what it was shown is not of its scope, and the rest would not make it whole.
  return { refused: new ApiError('forbidden', "the token's key prefixes changed: read again from a snapshot of its new scope", { prefixes }) };
}

/**
 * Checks a held request (a stream, a waiting long poll) again at each reload of the credentials, and
 * calls `onChange` when it is refused or shown fewer keys; returns the function that stops watching.
 */
export function watchScope(
  auth: Authenticator | null,
  request: FastifyRequest,
  asked: { prefix: string; key?: string | undefined },
  shown: ReadFilter,
  onChange: (change: ScopeChange) => void,
): () => void {
  if (auth === null || request.tokenEntry === null) return () => {};
  let current = shown;
  return auth.onReload(request, () => {
    const change = rescope(auth, request, asked, current);
    if (change === null) return;
    if ('narrowed' in change) current = change.narrowed;
    onChange(change);
  });
}

/** A batch with a key outside the token's prefixes: 403 naming the first such item; nothing is written. */
const batchScope: preHandlerHookHandler = (request, _reply, done) => {
  const prefixes = request.tokenEntry?.prefixes;
  if (prefixes) {
    const records = (request.body as { records?: { key?: unknown }[] } | undefined)?.records ?? [];
    for (const [index, item] of records.entries()) {
      if (typeof item.key === 'string' && !inScope(item.key, prefixes)) {
        return done(outsideScope(`records[${index}]: the key`, prefixes, { index }));
      }
    }
  }
  done();
};

/** Batch routes' check once the body is parsed, in their own preHandler so that others pay nothing; register first. */
export function enforceScopes(app: FastifyInstance): void {
  app.decorateRequest('tokenEntry', null);
  app.addHook('onRoute', (route) => {
    if (route.config?.scope !== 'batch') return;
    const own = route.preHandler;
    route.preHandler = own === undefined ? [batchScope] : [...(Array.isArray(own) ? own : [own]), batchScope];
  });
}
