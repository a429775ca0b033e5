// Bearer-token auth. The role a request needs is derived from the request itself
// (method and matched route pattern), never listed per route, so routes that are added
// later are covered without touching this file. Everything needs a token except the
// two health probes and the dashboard's static files: a path nobody thought of is
// closed, not open.
import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import type { Role } from '../config.js';
import { ApiError } from '../contract/errors.js';

const RANK: Record<Role, number> = { read: 0, write: 1, admin: 2 };

/**
 * Route patterns open without credentials: the probes that load balancers and
 * orchestrators call, and the dashboard's static files (routes/ui.ts). Those hold no
 * data, and the page must load before it can ask for a token; everything it shows comes
 * from /v1 calls that carry the user's token.
 */
export const OPEN_ROUTES: ReadonlySet<string> = new Set(['/healthz', '/readyz', '/ui', '/ui/', '/ui/:file']);

const READ_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);
const BEARER = /^Bearer +([^\s]+) *$/i;

/**
 * What a request must present: null for the open probes, otherwise the lowest role.
 * The matched pattern is used when there is one, because the router percent-decodes
 * static segments (/v1/%61dmin/x routes to /v1/admin/x); an unmatched path reaches
 * only the 404 handler, which reads nothing.
 */
export function requiredRole(method: string, routePattern: string | undefined, url: string): Role | null {
  const path = routePattern ?? url.split(/[?#]/, 1)[0]!;
  if (routePattern !== undefined && OPEN_ROUTES.has(routePattern)) return null;
  if (path === '/v1/admin' || path.startsWith('/v1/admin/')) return 'admin';
  // Unknown methods count as writes: a method nobody thought of is not a read.
  return READ_METHODS.has(method) ? 'read' : 'write';
}

const digest = (token: string): Buffer => createHash('sha256').update(token, 'utf8').digest();

export class Authenticator {
  private readonly entries: { digest: Buffer; role: Role }[];

  constructor(tokens: ReadonlyMap<string, Role>) {
    this.entries = [...tokens].map(([token, role]) => ({ digest: digest(token), role }));
  }

  /**
   * The role of a presented token, or null. Digests have a fixed length, so the
   * comparison takes the same time whatever the token's length, and every entry is
   * compared (no early exit), so timing tells nothing about which one matched.
   */
  roleOf(token: string): Role | null {
    const presented = digest(token);
    let found: Role | null = null;
    for (const entry of this.entries) {
      if (timingSafeEqual(presented, entry.digest)) found = entry.role;
    }
    return found;
  }

  /** The refusal for this request, or null when it may go on. */
  check(request: FastifyRequest): ApiError | null {
    const needed = requiredRole(request.method, request.routeOptions.url, request.url);
    if (needed === null) return null;
    const header = request.headers.authorization;
    const token = typeof header === 'string' ? BEARER.exec(header)?.[1] : undefined;
    const role = token === undefined ? null : this.roleOf(token);
    if (role === null) {
      const message = token === undefined ? 'send Authorization: Bearer <token>' : 'the token is not valid';
      return new ApiError('unauthorized', message, {}, { 'www-authenticate': 'Bearer' });
    }
    if (RANK[role] < RANK[needed]) {
      return new ApiError('forbidden', `this needs the ${needed} role; the token has ${role}`);
    }
    return null;
  }
}
