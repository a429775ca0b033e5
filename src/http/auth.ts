// Auth: a bearer token, or a client certificate whose CN names a token-file entry. The
// role a request needs is derived from the request itself (method and matched route
// pattern), never listed per route, so routes that are added later are covered without
// touching this file; which keys it may touch is the route's scope rule (scope.ts).
// Everything needs a token except the two health probes and the dashboard's static
// files: a path nobody thought of is closed, not open.
import { hash } from 'node:crypto';
import type { TLSSocket } from 'node:tls';
import type { FastifyRequest } from 'fastify';
import { ApiError } from '../contract/errors.js';
import { TokenFileError, type FileEntry, type Role, type TokenEntry } from '../token-file.js';
import { routeScope } from './scope.js';

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

const digest = (token: string): string => hash('sha256', token, 'hex');

/** The tokens in force: replaced whole on reload, so a request sees one set or the other. */
interface TokenSet {
  /** By the hex SHA-256 of the secret. */
  byDigest: Map<string, TokenEntry>;
  /** File entries by name, for client certificates' CNs. */
  byName: Map<string, TokenEntry>;
  /**
   * Authorization headers seen lately and the entry each named (null: none): clients
   * repeat theirs, which are then neither parsed nor hashed again. Unknown tokens are
   * kept alike, so a known token answers no faster than an unknown one; a lookup
   * matches a whole header or nothing (strings are compared only once their seeded
   * hashes agree); emptied when full, so headers sprayed at the server cost no memory.
   */
  seen: Map<string, TokenEntry | null>;
}

/** Headers kept in TokenSet.seen at most, and the longest kept. */
const SEEN_HEADERS = 4096;
const SEEN_HEADER_CHARS = 256;

/** STATELOG_TOKENS's entries are named by their position: "STATELOG_TOKENS#2". */
function tokenSet(legacy: ReadonlyMap<string, Role> | null, file: readonly FileEntry[]): TokenSet {
  const byDigest = new Map<string, TokenEntry>();
  let position = 0;
  for (const [token, role] of legacy ?? []) {
    position += 1;
    byDigest.set(digest(token), { name: `STATELOG_TOKENS#${position}`, role, prefixes: null });
  }
  const byName = new Map<string, TokenEntry>();
  for (const [index, { sha256, ...entry }] of file.entries()) {
    if (byDigest.has(sha256)) throw new TokenFileError(`entry ${index + 1} ("${entry.name}") has the secret of a STATELOG_TOKENS token`);
    byDigest.set(sha256, entry);
    byName.set(entry.name, entry);
  }
  return { byDigest, byName, seen: new Map() };
}

export interface AuthenticatorOptions {
  /** The TLS server asks for client certificates (STATELOG_TLS_CLIENT_CA). */
  clientCertificates?: boolean;
}

export class Authenticator {
  private tokens: TokenSet;
  private readonly clientCertificates: boolean;
  /** A connection's certificate CN, read once per connection. */
  private readonly commonNames = new WeakMap<object, string | null>();

  constructor(
    private readonly legacy: ReadonlyMap<string, Role> | null,
    file: readonly FileEntry[] = [],
    options: AuthenticatorOptions = {},
  ) {
    this.tokens = tokenSet(legacy, file);
    this.clientCertificates = options.clientCertificates ?? false;
  }

  /** How many tokens are in force. */
  get size(): number {
    return this.tokens.byDigest.size;
  }

  /**
   * Puts a token file's entries in force in place of the previous ones (STATELOG_TOKENS
   * stays); throws TokenFileError, and changes nothing, when they cannot be used.
   */
  replaceFile(entries: readonly FileEntry[]): void {
    this.tokens = tokenSet(this.legacy, entries);
  }

  /**
   * The entry of a presented secret, or null. The secret is hashed once and looked up
   * by its digest: the time taken depends on neither the secret nor which entry, if
   * any, it matches (a guess learns nothing of a stored digest's first characters, as
   * it cannot choose its digest's).
   */
  identify(token: string): TokenEntry | null {
    return this.tokens.byDigest.get(digest(token)) ?? null;
  }

  roleOf(token: string): Role | null {
    return this.identify(token)?.role ?? null;
  }

  /** The entry named by the CN of the connection's client certificate (checked by TLS against the CA). */
  private certified(request: FastifyRequest): TokenEntry | null {
    const socket = request.raw.socket as TLSSocket;
    let name = this.commonNames.get(socket);
    if (name === undefined) {
      const cn = socket.getPeerCertificate?.()?.subject?.CN;
      name = typeof cn === 'string' && socket.authorized ? cn : null;
      this.commonNames.set(socket, name);
    }
    return name === null ? null : (this.tokens.byName.get(name) ?? null);
  }

  /** The entry of the header's bearer token (null: none matches); undefined when it holds no bearer token. */
  private bearer(header: string): TokenEntry | null | undefined {
    const tokens = this.tokens;
    const seen = tokens.seen.get(header);
    if (seen !== undefined) return seen;
    const token = BEARER.exec(header)?.[1];
    if (token === undefined) return undefined;
    const entry = this.identify(token);
    if (header.length <= SEEN_HEADER_CHARS) {
      if (tokens.seen.size >= SEEN_HEADERS) tokens.seen.clear();
      tokens.seen.set(header, entry);
    }
    return entry;
  }

  /** The refusal for this request, or null when it may go on; sets request.tokenEntry. */
  check(request: FastifyRequest): ApiError | null {
    // routeOptions builds a new object at each read: read once.
    const route = request.routeOptions;
    const needed = requiredRole(request.method, route.url, request.url);
    if (needed === null) return null;
    const header = request.headers.authorization;
    const bearer = typeof header === 'string' ? this.bearer(header) : undefined;
    // A bearer token, when sent, speaks for the request (as etcd prefers a password to a certificate).
    const entry = bearer !== undefined ? bearer : this.clientCertificates ? this.certified(request) : null;
    if (entry === null) {
      const message =
        bearer !== undefined
          ? 'the token is not valid'
          : this.clientCertificates
            ? "the client certificate's CN names no token entry; or send Authorization: Bearer <token>"
            : 'send Authorization: Bearer <token>';
      return new ApiError('unauthorized', message, {}, { 'www-authenticate': 'Bearer' });
    }
    request.tokenEntry = entry;
    if (RANK[entry.role] < RANK[needed]) {
      return new ApiError('forbidden', `this needs the ${needed} role; the token has ${entry.role}`);
    }
    return routeScope(entry, route, request);
  }
}
