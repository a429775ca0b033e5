// Auth: every route × every kind of caller, with tokens set and with auth off.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { Authenticator, requiredRole } from '../src/http/auth.js';
import type { Role } from '../src/config.js';
import { startApp, type TestApp } from './support/helpers.js';
import { bearer, portOf, send, type Received } from './support/http.js';

const TOKENS = { read: 'tok-read.1', write: 'tok-write.2', admin: 'tok-admin.3' } satisfies Record<Role, string>;
const TOKENS_ENV = Object.entries(TOKENS)
  .map(([role, token]) => `${role}:${token}`)
  .join(',');
const RANK: Record<Role, number> = { read: 0, write: 1, admin: 2 };

interface RouteCase {
  method: string;
  path: string;
  body?: unknown;
  /** null: open to anyone. */
  needs: Role | null;
  /** The status of an allowed request. */
  ok: number;
  /** An endless answer: only its headers are read. */
  stream?: boolean;
}

/** Every route of the contract, the role it needs, and its success status. */
const ROUTES: RouteCase[] = [
  { method: 'PUT', path: '/v1/keys/matrix', body: { value: 1 }, needs: 'write', ok: 200 },
  { method: 'GET', path: '/v1/keys/matrix', needs: 'read', ok: 200 },
  { method: 'HEAD', path: '/v1/keys/matrix', needs: 'read', ok: 200 },
  { method: 'DELETE', path: '/v1/keys/matrix', needs: 'write', ok: 200 },
  { method: 'GET', path: '/v1/keys?prefix=mat', needs: 'read', ok: 200 },
  { method: 'POST', path: '/v1/records', body: { records: [{ key: 'matrix', value: 2 }] }, needs: 'write', ok: 200 },
  { method: 'GET', path: '/v1/stats', needs: 'read', ok: 200 },
  { method: 'GET', path: '/metrics', needs: 'read', ok: 200 },
  { method: 'GET', path: '/healthz', needs: null, ok: 200 },
  { method: 'GET', path: '/readyz', needs: null, ok: 200 },
  // The dashboard's static files (test/ui/ui-routes.test.ts serves the built ones).
  { method: 'GET', path: '/ui', needs: null, ok: 308 },
  { method: 'GET', path: '/v1/snapshot', needs: 'read', ok: 200 },
  { method: 'GET', path: '/v1/changes?after=0', needs: 'read', ok: 200 },
  { method: 'GET', path: '/v1/changes/stream?after=0', needs: 'read', ok: 200, stream: true },
  { method: 'POST', path: '/v1/admin/compact', needs: 'admin', ok: 200 },
];

type Caller = 'none' | 'bad' | Role;
const CALLERS: Caller[] = ['none', 'bad', 'read', 'write', 'admin'];

function headersOf(caller: Caller): Record<string, string> {
  if (caller === 'none') return {};
  if (caller === 'bad') return bearer('tok-wrong');
  return bearer(TOKENS[caller]);
}

function expected(route: RouteCase, caller: Caller): number {
  if (route.needs === null) return route.ok;
  if (caller === 'none' || caller === 'bad') return 401;
  return RANK[caller] >= RANK[route.needs] ? route.ok : 403;
}

async function call(port: number, route: RouteCase, headers: Record<string, string>): Promise<Received> {
  const body = route.body === undefined ? undefined : JSON.stringify(route.body);
  return send(port, {
    method: route.method,
    path: route.path,
    headers: { ...headers, ...(body ? { 'content-type': 'application/json' } : {}) },
    body,
    stream: route.stream,
  });
}

function expectRefusal(res: Received, status: number): void {
  if (status === 401) {
    expect(res.headers['www-authenticate']).toBe('Bearer');
    expect(res.json).toMatchObject({ error: { code: 'unauthorized' } });
  } else if (status === 403) {
    expect(res.json).toMatchObject({ error: { code: 'forbidden' } });
  }
}

const cases = ROUTES.flatMap((route) => CALLERS.map((caller) => ({ route, caller })));

describe('with STATELOG_TOKENS set', () => {
  let t: TestApp;
  let port: number;
  beforeAll(async () => {
    t = await startApp({ STATELOG_TOKENS: TOKENS_ENV });
    port = portOf(t.app.server);
  });
  afterAll(() => t.close());
  // GET and DELETE of the key need it to be live.
  beforeEach(async () => {
    const seeded = await call(port, ROUTES[0]!, bearer(TOKENS.write));
    expect(seeded.status).toBe(200);
  });

  it.each(cases.map(({ route, caller }) => [route.method, route.path, caller, expected(route, caller), route] as const))(
    '%s %s by %s → %i',
    async (_method, _path, caller, status, route) => {
      const res = await call(port, route, headersOf(caller));
      expect(res.status).toBe(status);
      if (route.method !== 'HEAD') expectRefusal(res, status);
    },
  );

  it.each([
    ['a lower-case scheme', `bearer ${TOKENS.read}`, 200],
    ['several spaces', `Bearer   ${TOKENS.read}`, 200],
    ['Basic', `Basic ${Buffer.from(`x:${TOKENS.read}`).toString('base64')}`, 401],
    ['no scheme', TOKENS.read, 401],
    ['the scheme alone', 'Bearer', 401],
    ['a token and more', `Bearer ${TOKENS.read} ${TOKENS.read}`, 401],
    ['a prefix of a token', `Bearer ${TOKENS.read.slice(0, -1)}`, 401],
    ['a token with one more character', `Bearer ${TOKENS.read}x`, 401],
    ['a token in other case', `Bearer ${TOKENS.read.toUpperCase()}`, 401],
  ])('Authorization with %s → %i', async (_what, authorization, status) => {
    const res = await send(port, { method: 'GET', path: '/v1/stats', headers: { authorization } });
    expect(res.status).toBe(status);
    expectRefusal(res, status);
  });

  it('refuses a malformed path without a token (401) before saying it is malformed (400)', async () => {
    const anonymous = await send(port, { method: 'GET', path: '/v1/keys/%ZZ' });
    expect(anonymous.status).toBe(401);
    const reader = await send(port, { method: 'GET', path: '/v1/keys/%ZZ', headers: bearer(TOKENS.read) });
    expect(reader.status).toBe(400);
    expect(reader.json).toMatchObject({ error: { code: 'invalid_key' } });
  });

  it('refuses writes of a reader and leaves no trace', async () => {
    const before = await send(port, { method: 'GET', path: '/v1/stats', headers: bearer(TOKENS.read) });
    const res = await call(port, { ...ROUTES[0]!, body: { value: 'changed' } }, bearer(TOKENS.read));
    expect(res.status).toBe(403);
    const after = await send(port, { method: 'GET', path: '/v1/stats', headers: bearer(TOKENS.read) });
    expect((after.json as { head: number }).head).toBe((before.json as { head: number }).head);
  });
});

describe('routes added later by other code', () => {
  let t: TestApp;
  let port: number;
  beforeAll(async () => {
    // Registered the way another issue's plugin would be: auth knows nothing of them.
    t = await startApp({ STATELOG_TOKENS: TOKENS_ENV }, {
      prepare: (app) => {
        app.post('/v1/admin/test-op', async () => ({ done: true }));
        app.get('/v1/test-thing', async () => ({ thing: true }));
        app.patch('/v1/test-thing', async () => ({ patched: true }));
      },
    });
    port = portOf(t.app.server);
  });
  afterAll(() => t.close());

  const later: RouteCase[] = [
    { method: 'POST', path: '/v1/admin/test-op', needs: 'admin', ok: 200 },
    // The router decodes %61 to "a": the role follows the route it reaches.
    { method: 'POST', path: '/v1/%61dmin/test-op', needs: 'admin', ok: 200 },
    { method: 'GET', path: '/v1/test-thing', needs: 'read', ok: 200 },
    { method: 'PATCH', path: '/v1/test-thing', needs: 'write', ok: 200 },
  ];
  it.each(
    later.flatMap((route) => CALLERS.map((caller) => [route.method, route.path, caller, expected(route, caller), route] as const)),
  )('%s %s by %s → %i', async (_method, _path, caller, status, route) => {
    const res = await call(port, route, headersOf(caller));
    expect(res.status).toBe(status);
    expectRefusal(res, status);
  });
});

describe('with STATELOG_TOKENS unset', () => {
  let t: TestApp;
  let port: number;
  beforeAll(async () => {
    t = await startApp();
    port = portOf(t.app.server);
  });
  afterAll(() => t.close());
  beforeEach(async () => {
    expect((await call(port, ROUTES[0]!, {})).status).toBe(200);
  });

  it.each(
    ROUTES.flatMap((route) => (['none', 'bad'] as const).map((caller) => [route.method, route.path, caller, route] as const)),
  )('%s %s by %s → its success status', async (_method, _path, caller, route) => {
    expect((await call(port, route, headersOf(caller))).status).toBe(route.ok);
  });
});

describe('requiredRole', () => {
  it.each([
    ['GET', '/v1/keys/:key', '/v1/keys/a', 'read'],
    ['HEAD', '/v1/keys/:key', '/v1/keys/a', 'read'],
    ['PUT', '/v1/keys/:key', '/v1/keys/a', 'write'],
    ['DELETE', '/v1/keys/:key', '/v1/keys/a', 'write'],
    ['POST', '/v1/records', '/v1/records', 'write'],
    ['GET', '/v1/admin/anything', '/v1/admin/anything', 'admin'],
    ['GET', undefined, '/v1/admin', 'admin'],
    ['DELETE', undefined, '/v1/admin/x?y=1', 'admin'],
    ['GET', undefined, '/healthz', 'read'],
    ['GET', '/healthz', '/healthz', null],
    ['POST', '/readyz', '/readyz', null],
    ['GET', '/ui', '/ui', null],
    ['GET', '/ui/', '/ui/', null],
    ['GET', '/ui/:file', '/ui/app.js', null],
    ['POST', undefined, '/ui/', 'write'],
    ['GET', undefined, '/ui/x/y', 'read'],
    ['GET', undefined, '/v1/administrator', 'read'],
    ['PROPFIND', undefined, '/v1/x', 'write'],
  ] as const)('%s on route %s (%s) needs %s', (method, pattern, url, role) => {
    expect(requiredRole(method, pattern, url)).toBe(role);
  });
});

describe('Authenticator.roleOf', () => {
  const auth = new Authenticator(new Map([...Object.entries(TOKENS)].map(([role, token]) => [token, role as Role])));

  it('knows each token, and nothing else of any length', () => {
    for (const [role, token] of Object.entries(TOKENS)) expect(auth.roleOf(token)).toBe(role);
    for (const other of ['', 'x', TOKENS.read.slice(1), `${TOKENS.admin}${TOKENS.admin}`, 'tok-read.1 ', 'é'.repeat(5000)]) {
      expect(auth.roleOf(other)).toBeNull();
    }
  });
});
