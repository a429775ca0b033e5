// Auth: a bearer token, or a client certificate whose CN names a token-file entry. The role needed
// comes from the method and matched route, never a per-route list, so a new path is closed, not open.
import { hash } from 'node:crypto';
import type { TLSSocket } from 'node:tls';
import type { FastifyRequest } from 'fastify';
import { ApiError } from '../contract/errors.js';
import { TokenFileError, type FileEntry, type Role, type TokenEntry } from '../token-file.js';
import { routeScope } from './scope.js';

const RANK: Record<Role, number> = { read: 0, write: 1, admin: 2 };

/** Open without credentials: the probes, and the dashboard's files (no data; the page loads before it asks for a token). */
export const OPEN_ROUTES: ReadonlySet<string> = new Set(['/healthz', '/readyz', '/ui', '/ui/', '/ui/:file']);

const READ_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);
const BEARER = /^Bearer +([^\s]+) *$/i;

/** The lowest role a request needs (null: open), by the matched pattern: the router percent-decodes static segments. */
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
  byDigest: Map<string, TokenEntry>;
  byName: Map<string, TokenEntry>;
  // Authorization headers seen lately with the entry each named (null: none), unknown ones alike so that a
  // known token answers no faster; matched whole, and emptied when full, so sprayed headers cost no memory.
  seen: Map<string, TokenEntry | null>;
}

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
  clientCertificates?: boolean;
}

export class Authenticator {
  private tokens: TokenSet;
  private readonly clientCertificates: boolean;
  /** Told after each reload, so that held requests (streams, long polls) are checked again. */
  private readonly reloadListeners = new Set<() => void>();
  /** Moved by each reload; the value each request was checked at. */
  private generation = 0;
  private readonly checkedAt = new WeakMap<FastifyRequest, number>();
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

  get size(): number {
    return this.tokens.byDigest.size;
  }

  /** Puts a token file's entries in force (STATELOG_TOKENS stays); throws TokenFileError, changing nothing, when unusable. */
  replaceFile(entries: readonly FileEntry[]): void {
    this.tokens = tokenSet(this.legacy, entries);
    this.generation += 1;
    for (const listener of [...this.reloadListeners]) listener();
  }

  /**
   * Calls `listener` after each reload until the returned function is called, and at once if a reload
   * came since the request was checked: a request held for long is checked again against each new set.
   */
  onReload(request: FastifyRequest, listener: () => void): () => void {
    this.reloadListeners.add(listener);
    if ((this.checkedAt.get(request) ?? this.generation) !== this.generation) listener();
    return () => void this.reloadListeners.delete(listener);
  }

  /** Looked up by the secret's digest: the time depends on neither the secret nor the entry it matches. */
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
    this.checkedAt.set(request, this.generation);
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
