// Tenants: tokens from STATELOG_TOKENS_FILE limited to key prefixes, and client
// certificates naming a file entry. Every route × every kind of caller, on a real
// listening server (HTTPS for the certificates), then what a scoped reader is shown.
import { readFileSync, rmSync } from 'node:fs';
import { Agent, request } from 'undici';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { digestHex, digestOf } from '../src/contract/digest.js';
import { makeTestCa, type TestCa } from './support/certificates.js';
import { startApp, tempDir, type TestApp } from './support/helpers.js';
import { bearer, portOf, send, type Received } from './support/http.js';
import { writeTokenFile, type TestToken } from './support/token-file.js';

const SCOPED: TestToken = { name: 'svc-scoped', secret: 'scoped-secret-1', role: 'admin', prefixes: ['t/a/', 't/b/'] };
const ROOT: TestToken = { name: 'root', secret: 'root-secret-2', role: 'admin' };
const READER: TestToken = { name: 'reader-a', secret: 'reader-secret-3', role: 'read', prefixes: ['t/a/'] };
const TOKENS = [SCOPED, ROOT, READER];

type Rule = 'open' | 'scoped' | 'unscoped';

interface Call {
  path: string;
  body?: unknown;
}

interface RouteCase {
  method: string;
  rule: Rule;
  /** A request within SCOPED's prefixes (or the route's only request). */
  inside: Call;
  /** The same request outside them (scoped routes). */
  outside?: Call;
  ok: number;
  stream?: boolean;
}

const KEY_IN = '/v1/keys/t%2Fa%2Fk';
const KEY_OUT = '/v1/keys/other%2Fk';

const ROUTES: RouteCase[] = [
  { method: 'PUT', rule: 'scoped', inside: { path: KEY_IN, body: { value: 1 } }, outside: { path: KEY_OUT, body: { value: 1 } }, ok: 200 },
  { method: 'GET', rule: 'scoped', inside: { path: KEY_IN }, outside: { path: KEY_OUT }, ok: 200 },
  { method: 'HEAD', rule: 'scoped', inside: { path: KEY_IN }, outside: { path: KEY_OUT }, ok: 200 },
  { method: 'DELETE', rule: 'scoped', inside: { path: KEY_IN }, outside: { path: KEY_OUT }, ok: 200 },
  { method: 'GET', rule: 'scoped', inside: { path: `${KEY_IN}/history` }, outside: { path: `${KEY_OUT}/history` }, ok: 200 },
  { method: 'GET', rule: 'scoped', inside: { path: '/v1/keys?prefix=t%2Fa%2F' }, outside: { path: '/v1/keys?prefix=other' }, ok: 200 },
  {
    method: 'POST',
    rule: 'scoped',
    inside: { path: '/v1/records', body: { records: [{ key: 't/a/k', value: 2 }, { key: 't/b/k', value: 3 }] } },
    outside: { path: '/v1/records', body: { records: [{ key: 't/a/k', value: 2 }, { key: 'other/k', value: 3 }] } },
    ok: 200,
  },
  { method: 'GET', rule: 'scoped', inside: { path: '/v1/snapshot?prefix=t%2F' }, outside: { path: '/v1/snapshot?prefix=other' }, ok: 200 },
  { method: 'GET', rule: 'scoped', inside: { path: '/v1/changes?after=0&prefix=t%2Fb%2F' }, outside: { path: '/v1/changes?after=0&key=other%2Fk' }, ok: 200 },
  {
    method: 'GET',
    rule: 'scoped',
    inside: { path: '/v1/changes/stream?snapshot=true' },
    outside: { path: '/v1/changes/stream?after=0&prefix=o' },
    ok: 200,
    stream: true,
  },
  { method: 'GET', rule: 'unscoped', inside: { path: '/v1/stats' }, ok: 200 },
  { method: 'GET', rule: 'unscoped', inside: { path: '/metrics' }, ok: 200 },
  { method: 'POST', rule: 'unscoped', inside: { path: '/v1/admin/compact' }, ok: 200 },
  { method: 'GET', rule: 'open', inside: { path: '/healthz' }, ok: 200 },
  { method: 'GET', rule: 'open', inside: { path: '/readyz' }, ok: 200 },
  { method: 'GET', rule: 'open', inside: { path: '/ui' }, ok: 308 },
];

type Caller = 'in scope' | 'outside' | 'unscoped' | 'unscoped outside' | 'no token' | 'wrong token';
const CALLERS: Caller[] = ['in scope', 'outside', 'unscoped', 'unscoped outside', 'no token', 'wrong token'];

function expected(route: RouteCase, caller: Caller): number {
  if (route.rule === 'open') return route.ok;
  if (caller === 'no token' || caller === 'wrong token') return 401;
  if (caller === 'unscoped' || caller === 'unscoped outside') return route.ok;
  if (route.rule === 'unscoped') return 403;
  return caller === 'in scope' ? route.ok : 403;
}

function requestOf(route: RouteCase, caller: Caller): Call {
  return caller === 'outside' || caller === 'unscoped outside' ? (route.outside ?? route.inside) : route.inside;
}

function headersOf(caller: Caller): Record<string, string> {
  if (caller === 'no token') return {};
  if (caller === 'wrong token') return bearer('not-a-token');
  return bearer(caller === 'unscoped' || caller === 'unscoped outside' ? ROOT.secret : SCOPED.secret);
}

function expectAnswer(res: { status: number; json: unknown }, status: number, method: string): void {
  expect(res.status).toBe(status);
  if (method === 'HEAD') return;
  if (status === 401) expect(res.json).toMatchObject({ error: { code: 'unauthorized' } });
  if (status === 403) expect(res.json).toMatchObject({ error: { code: 'forbidden', prefixes: SCOPED.prefixes } });
}

async function seed(port: number): Promise<void> {
  for (const path of [KEY_IN, KEY_OUT]) {
    const res = await send(port, { method: 'PUT', path, headers: { ...bearer(ROOT.secret), 'content-type': 'application/json' }, body: '{"value":0}' });
    expect(res.status).toBe(200);
  }
}

/** An app with the test's token file, and its port. */
async function startWithTokens(): Promise<{ t: TestApp; port: number }> {
  const dir = tempDir();
  const t = await startApp({ STATELOG_TOKENS_FILE: writeTokenFile(dir, TOKENS) }, { dir });
  return { t, port: portOf(t.app.server) };
}

const bodyOf = (call: Call) => (call.body === undefined ? undefined : JSON.stringify(call.body));

describe('scoped tokens: every route × every caller', () => {
  let t: TestApp;
  let port: number;
  beforeAll(async () => {
    ({ t, port } = await startWithTokens());
  });
  afterAll(() => t.close());
  beforeEach(() => seed(port));

  it.each(ROUTES.flatMap((route) => CALLERS.map((caller) => [route.method, requestOf(route, caller).path, caller, expected(route, caller), route] as const)))(
    '%s %s by %s → %i',
    async (method, path, caller, status, route) => {
      const call = requestOf(route, caller);
      const body = bodyOf(call);
      const res = await send(port, { method, path, headers: { ...headersOf(caller), ...(body ? { 'content-type': 'application/json' } : {}) }, body, stream: route.stream });
      expectAnswer(res, status, method);
    },
  );
});

describe('client certificates: every route × a certificate naming the scoped entry', () => {
  let ca: TestCa;
  let t: TestApp;
  let agents: Record<'scoped' | 'stranger', Agent>;
  let base: string;
  beforeAll(async () => {
    ca = makeTestCa();
    const server = ca.issue('server');
    const dir = tempDir();
    t = await startApp(
      { STATELOG_TOKENS_FILE: writeTokenFile(dir, TOKENS), STATELOG_TLS_CERT: server.certPath, STATELOG_TLS_KEY: server.keyPath, STATELOG_TLS_CLIENT_CA: ca.caPath },
      { dir },
    );
    base = `https://127.0.0.1:${portOf(t.app.server)}`;
    const agent = (cn: string) => {
      const issued = ca.issue(cn, cn);
      return new Agent({ connect: { ca: ca.ca, cert: issued.cert, key: readKey(issued.keyPath) } });
    };
    agents = { scoped: agent(SCOPED.name), stranger: agent('nobody-in-the-file') };
  });
  afterAll(async () => {
    await Promise.all(Object.values(agents ?? {}).map((agent) => agent.close()));
    await t?.close();
    rmSync(ca.dir, { recursive: true, force: true });
  });

  async function call(agent: Agent, method: string, c: Call, headers: Record<string, string> = {}, stream = false): Promise<Received> {
    const body = bodyOf(c);
    const res = await request(`${base}${c.path}`, {
      method: method as 'GET',
      headers: { ...headers, ...(body ? { 'content-type': 'application/json' } : {}) },
      body,
      dispatcher: agent,
    });
    if (stream && res.statusCode < 300) {
      res.body.destroy();
      return { status: res.statusCode, headers: res.headers as Received['headers'], text: '', json: undefined };
    }
    const text = await res.body.text();
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
    return { status: res.statusCode, headers: res.headers as Received['headers'], text, json };
  }

  beforeEach(async () => {
    for (const path of [KEY_IN, KEY_OUT]) expect((await call(agents.scoped, 'PUT', { path, body: { value: 0 } }, bearer(ROOT.secret))).status).toBe(200);
  });

  it.each(ROUTES.flatMap((route) => (['in scope', 'outside'] as const).map((caller) => [route.method, requestOf(route, caller).path, caller, route] as const)))(
    '%s %s with the certificate, %s',
    async (method, _path, caller, route) => {
      const res = await call(agents.scoped, method, requestOf(route, caller), {}, route.stream);
      expectAnswer(res, expected(route, caller), method);
    },
  );

  it('a certificate whose CN names no entry is 401; a bearer token on such a connection speaks for itself', async () => {
    const res = await call(agents.stranger, 'GET', { path: KEY_IN });
    expectAnswer(res, 401, 'GET');
    expect((await call(agents.stranger, 'GET', { path: '/v1/stats' }, bearer(ROOT.secret))).status).toBe(200);
    expect((await call(agents.stranger, 'GET', { path: '/healthz' })).status).toBe(200);
  });

  it('a client without a certificate is refused at the handshake', async () => {
    const bare = new Agent({ connect: { ca: ca.ca } });
    try {
      await expect(request(`${base}/healthz`, { dispatcher: bare }).then((res) => res.body.text())).rejects.toThrow();
    } finally {
      await bare.close();
    }
  });
});

describe('what a scoped token is shown', () => {
  let t: TestApp;
  let port: number;
  beforeAll(async () => {
    ({ t, port } = await startWithTokens());
    const records = ['t/a/1', 'other/1', 't/b/1', 't/c/1', 't/a/2', 'zz', 't/b/2'].map((key, i) => ({ key, value: i }));
    const res = await post(ROOT, '/v1/records', { records });
    expect(res.status).toBe(200);
  });
  afterAll(() => t.close());

  const get = (token: TestToken, path: string) => send(port, { method: 'GET', path, headers: bearer(token.secret) });
  const post = (token: TestToken, path: string, body: unknown, headers: Record<string, string> = {}) =>
    send(port, { method: 'POST', path, headers: { ...bearer(token.secret), 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  const keysOf = (res: Received) => (res.json as { items: { key: string }[] }).items.map((item) => item.key);

  it('lists only its keys, in byte order, across its prefixes and pages', async () => {
    expect(keysOf(await get(SCOPED, '/v1/keys'))).toEqual(['t/a/1', 't/a/2', 't/b/1', 't/b/2']);
    // A prefix wider than the scope is narrowed to it; a narrower one is as asked.
    expect(keysOf(await get(SCOPED, '/v1/keys?prefix=t%2F'))).toEqual(['t/a/1', 't/a/2', 't/b/1', 't/b/2']);
    expect(keysOf(await get(SCOPED, '/v1/keys?prefix=t%2Fb%2F2'))).toEqual(['t/b/2']);
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const res = await get(SCOPED, `/v1/keys?limit=1${cursor ? `&cursor=${cursor}` : ''}`);
      seen.push(...keysOf(res));
      cursor = (res.json as { cursor: string | null }).cursor;
    } while (cursor !== null);
    expect(seen).toEqual(['t/a/1', 't/a/2', 't/b/1', 't/b/2']);
    const refused = await get(SCOPED, '/v1/keys?prefix=t%2Fc%2F');
    expect(refused.status).toBe(403);
  });

  it('snapshots only its keys, with the count and digest of what it shows', async () => {
    for (const [token, keys] of [[SCOPED, ['t/a/1', 't/a/2', 't/b/1', 't/b/2']], [READER, ['t/a/1', 't/a/2']]] as const) {
      const res = await get(token, '/v1/snapshot');
      const lines = res.text.trim().split('\n').map((line) => JSON.parse(line) as { key: string; offset: number; count?: number; digest?: string });
      const trailer = lines.pop()!;
      expect(lines.map((line) => line.key)).toEqual(keys);
      expect(trailer).toMatchObject({ end: true, offset: 7, count: keys.length, digest: digestHex(digestOf(lines)) });
    }
  });

  it('reads changes of its keys only, while next moves past the others', async () => {
    const res = await get(SCOPED, '/v1/changes?after=0');
    const page = res.json as { records: { key: string }[]; next: number; head: number };
    expect(page.records.map((record) => record.key)).toEqual(['t/a/1', 't/b/1', 't/a/2', 't/b/2']);
    expect(page).toMatchObject({ next: 7, head: 7 });
    // Its prefixes' common start (t/) holds t/c/1 at offset 4: a full page of one record
    // it is not shown, answered empty, and the reader moves past it.
    const small = (await get(SCOPED, '/v1/changes?after=3&limit=1')).json as { records: unknown[]; next: number };
    expect(small).toMatchObject({ records: [], next: 4 });
    expect((await get(READER, '/v1/changes?after=0&key=t%2Fb%2F1')).status).toBe(403);
  });

  it('streams a snapshot and changes of its keys only, with progress past the others', async () => {
    const controller = new AbortController();
    const res = await fetch(`http://127.0.0.1:${port}/v1/changes/stream?snapshot=true`, { headers: bearer(READER.secret), signal: controller.signal });
    const reader = res.body!.getReader();
    let text = '';
    const until = async (done: () => boolean) => {
      while (!done()) text += Buffer.from((await reader.read()).value!).toString('utf8');
    };
    await until(() => text.includes('event: snapshot-end'));
    await post(ROOT, '/v1/records', { records: [{ key: 'other/2', value: 1 }, { key: 't/a/3', value: 2 }, { key: 't/b/3', value: 3 }] });
    await until(() => text.includes('"offset":10}'));
    controller.abort();
    const records = [...text.matchAll(/event: record\ndata: (.*)\n/g)].map((match) => (JSON.parse(match[1]!) as { key: string }).key);
    expect(records).toEqual(['t/a/1', 't/a/2', 't/a/3']);
    expect(text).toMatch(/event: progress\ndata: \{"offset":10\}/);
  });

  it('refuses a batch with one key outside, naming its index, and writes nothing', async () => {
    const before = (await get(ROOT, '/v1/stats')).json as { head: number };
    const res = await post(SCOPED, '/v1/records', { records: [{ key: 't/a/9', value: 1 }, { key: 't/c/9', value: 1 }] });
    expect(res.status).toBe(403);
    expect(res.json).toMatchObject({ error: { code: 'forbidden', index: 1 } });
    expect(((await get(ROOT, '/v1/stats')).json as { head: number }).head).toBe(before.head);
  });

  it('remembers idempotency keys per token entry: two tokens, one key, two requests', async () => {
    const headers = { 'idempotency-key': 'same-key-1' };
    const first = await post(SCOPED, '/v1/records', { records: [{ key: 't/a/idem', value: 1 }] }, headers);
    const second = await post(ROOT, '/v1/records', { records: [{ key: 't/a/idem', value: 2 }] }, headers);
    expect([first.status, second.status]).toEqual([200, 200]);
    expect(second.headers['idempotent-replayed']).toBeUndefined();
    const replay = await post(ROOT, '/v1/records', { records: [{ key: 't/a/idem', value: 2 }] }, headers);
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(replay.json).toEqual(second.json);
    const reused = await post(SCOPED, '/v1/records', { records: [{ key: 't/a/idem', value: 2 }] }, headers);
    expect(reused.status).toBe(422);
  });
});

describe('a route registered without a scope rule', () => {
  let t: TestApp;
  let port: number;
  beforeAll(async () => {
    const dir = tempDir();
    t = await startApp({ STATELOG_TOKENS_FILE: writeTokenFile(dir, TOKENS) }, { dir, prepare: (app) => void app.get('/v1/test-unruled', async () => ({ ok: true })) });
    port = portOf(t.app.server);
  });
  afterAll(() => t.close());

  it('is refused to a token with prefixes and served to one without', async () => {
    const scoped = await send(port, { method: 'GET', path: '/v1/test-unruled', headers: bearer(SCOPED.secret) });
    expect(scoped.status).toBe(403);
    const root = await send(port, { method: 'GET', path: '/v1/test-unruled', headers: bearer(ROOT.secret) });
    expect(root.status).toBe(200);
  });
});

function readKey(path: string): string {
  return readFileSync(path, 'utf8');
}
