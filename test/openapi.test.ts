// openapi.yaml against the code: the document is valid OpenAPI 3.1 and its schemas
// compile; it lists exactly the routes the app registers; its request schemas accept
// what the server accepts; and real answers, for every documented status of every
// route, match it (test/support/openapi-responses.ts). The last test fails when a
// documented status was never produced here.
import { compileErrors, validate } from '@readme/openapi-parser';
import type { Response } from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, startApp, type TestApp } from './helpers.js';
import {
  documentedResponses,
  documentedRoutes,
  exercisedResponses,
  expectDocumented,
  loadOpenApi,
  OPENAPI_FILE,
  requestBodyProblems,
  schemaPointers,
  schemaValidator,
  undocumented,
} from './support/openapi-responses.js';

const KEY = '/v1/keys/{key}';
const MAX_VALUE_BYTES = 64;

const keyPath = (key: string): string => `/v1/keys/${encodeURIComponent(key)}`;
const text = (value: unknown): string => (typeof value === 'string' ? value : JSON.stringify(value));

function put(t: TestApp, key: string, body: unknown, headers: Record<string, string> = {}) {
  return t.http.put(keyPath(key)).set({ ...json, ...headers }).send(text(body));
}

function del(t: TestApp, key: string, headers: Record<string, string> = {}) {
  return t.http.delete(keyPath(key)).set(headers);
}

function batch(t: TestApp, records: unknown, headers: Record<string, string> = {}) {
  return t.http.post('/v1/records').set({ ...json, ...headers }).send(text({ records }));
}

/** Sets a key, then deletes it. */
async function gone(t: TestApp, key: string): Promise<void> {
  await put(t, key, { value: 1 });
  await del(t, key);
}

/** Sends the same request twice; answers the second (a replay when an Idempotency-Key is set). */
async function twice(send: () => PromiseLike<Response>): Promise<Response> {
  await send();
  return send();
}

const replayed = (res: Response) => expect(res.headers['idempotent-replayed']).toBe('true');

/** One request under test: the route it exercises ("PUT /v1/keys/{key}"), what it expects, and how to send it. */
interface Case {
  route: string;
  status: number;
  code?: string;
  name: string;
  send(t: TestApp): PromiseLike<Response>;
  check?(res: Response): void;
}

const cases: Case[] = [
  // PUT /v1/keys/{key}
  {
    route: `PUT ${KEY}`, status: 200, name: 'sets a value; ETag is the offset',
    send: (t) => put(t, 'put/ok', { value: { balance: 150 } }),
    check: (res) => expect(res.headers.etag).toBe(`"${res.body.offset}"`),
  },
  {
    route: `PUT ${KEY}`, status: 200, name: 'replays the answer for a repeated Idempotency-Key',
    send: (t) => twice(() => put(t, 'put/replay', { value: 1 }, { 'idempotency-key': 'put-replay' })),
    check: replayed,
  },
  {
    route: `PUT ${KEY}`, status: 200, name: 'a replay whatever the whitespace of the body',
    send: async (t) => {
      await put(t, 'put/space', '{"value":[1,2]}', { 'idempotency-key': 'put-space' });
      return put(t, 'put/space', '{ "value" : [ 1, 2 ] }\n', { 'idempotency-key': 'put-space' });
    },
    check: replayed,
  },
  {
    route: `PUT ${KEY}`, status: 200, name: 'an Idempotency-Key stays free after a refused request',
    send: async (t) => {
      await put(t, 'put/free', { value: 1, extra: 1 }, { 'idempotency-key': 'put-free' });
      return put(t, 'put/free', { value: 1 }, { 'idempotency-key': 'put-free' });
    },
    check: (res) => expect(res.headers['idempotent-replayed']).toBeUndefined(),
  },
  { route: `PUT ${KEY}`, status: 400, code: 'invalid_json', name: 'malformed JSON', send: (t) => put(t, 'put/bad', '{"value":') },
  { route: `PUT ${KEY}`, status: 400, code: 'invalid_json', name: 'an empty body', send: (t) => put(t, 'put/bad', '') },
  {
    route: `PUT ${KEY}`, status: 400, code: 'invalid_json', name: 'a __proto__ member inside the value',
    send: (t) => put(t, 'put/bad', '{"value":{"__proto__":{"admin":true}}}'),
  },
  {
    route: `PUT ${KEY}`, status: 400, code: 'invalid_json', name: 'a constructor.prototype member inside the value',
    send: (t) => put(t, 'put/bad', '{"value":{"constructor":{"prototype":{"admin":true}}}}'),
  },
  {
    route: `PUT ${KEY}`, status: 400, code: 'invalid_request', name: 'a member besides value',
    send: (t) => put(t, 'put/bad', { value: 1, ttl: 5 }),
  },
  {
    route: `PUT ${KEY}`, status: 400, code: 'invalid_request', name: 'If-Match with two offsets',
    send: (t) => put(t, 'put/bad', { value: 1 }, { 'if-match': '"1", "2"' }),
  },
  {
    route: `PUT ${KEY}`, status: 400, code: 'invalid_request', name: 'an Idempotency-Key with a space',
    send: (t) => put(t, 'put/bad', { value: 1 }, { 'idempotency-key': 'a b' }),
  },
  {
    route: `PUT ${KEY}`, status: 400, code: 'invalid_key', name: 'a control character in the key',
    send: (t) => put(t, 'put\u0001bad', { value: 1 }),
  },
  {
    route: `PUT ${KEY}`, status: 400, code: 'invalid_key', name: 'a key of 514 UTF-8 bytes',
    send: (t) => put(t, 'é'.repeat(257), { value: 1 }),
  },
  {
    route: `PUT ${KEY}`, status: 400, code: 'invalid_key', name: 'a raw / in the key',
    send: (t) => t.http.put('/v1/keys/a/b').set(json).send('{"value":1}'),
  },
  {
    route: `PUT ${KEY}`, status: 400, code: 'invalid_key', name: 'malformed percent-encoding in the key',
    send: (t) => t.http.put('/v1/keys/%ZZ').set(json).send('{"value":1}'),
  },
  {
    route: `PUT ${KEY}`, status: 412, code: 'precondition_failed', name: 'If-Match names another offset',
    send: async (t) => {
      const { body } = await put(t, 'put/cas', { value: 1 });
      return put(t, 'put/cas', { value: 2 }, { 'if-match': `"${body.offset + 100}"` });
    },
    check: (res) => expect(res.body.error.currentOffset).toEqual(expect.any(Number)),
  },
  {
    route: `PUT ${KEY}`, status: 412, code: 'precondition_failed', name: 'If-Match * on a key that was never set',
    send: (t) => put(t, 'put/absent', { value: 1 }, { 'if-match': '*' }),
    check: (res) => expect(res.body.error.currentOffset).toBeNull(),
  },
  {
    route: `PUT ${KEY}`, status: 412, code: 'precondition_failed', name: 'a replayed If-None-Match * failure',
    send: async (t) => {
      await put(t, 'put/live', { value: 1 });
      return twice(() => put(t, 'put/live', { value: 2 }, { 'if-none-match': '*', 'idempotency-key': 'put-412' }));
    },
    check: replayed,
  },
  {
    route: `PUT ${KEY}`, status: 413, code: 'payload_too_large', name: 'a value over STATELOG_MAX_VALUE_BYTES',
    send: (t) => put(t, 'put/big', { value: 'x'.repeat(MAX_VALUE_BYTES) }),
    check: (res) => expect(res.body.error.limit).toBe(MAX_VALUE_BYTES),
  },
  {
    route: `PUT ${KEY}`, status: 413, code: 'payload_too_large', name: 'a body over the body limit',
    send: (t) => put(t, 'put/big', { value: 'x'.repeat(70_000) }),
  },
  {
    route: `PUT ${KEY}`, status: 415, code: 'unsupported_media_type', name: 'a text/plain body',
    send: (t) => t.http.put(keyPath('put/text')).set('content-type', 'text/plain').send('{"value":1}'),
  },
  {
    route: `PUT ${KEY}`, status: 422, code: 'idempotency_key_reused', name: 'an Idempotency-Key reused with another body',
    send: async (t) => {
      await put(t, 'put/reuse', { value: 1 }, { 'idempotency-key': 'put-reuse' });
      return put(t, 'put/reuse', { value: 2 }, { 'idempotency-key': 'put-reuse' });
    },
  },

  ...[
    ['member-order', { value: { a: 1, b: 2 } }, { value: { b: 2, a: 1 } }, {}],
    ['if-match', { value: 1 }, { value: 1 }, { 'if-match': '*' }],
  ].map(
    ([what, first, second, headers]): Case => ({
      route: `PUT ${KEY}`, status: 422, code: 'idempotency_key_reused', name: `the fingerprint covers ${what}`,
      send: async (t) => {
        const key = `put/fp-${what}`;
        await put(t, key, first, { 'idempotency-key': key });
        return put(t, key, second, { ...(headers as Record<string, string>), 'idempotency-key': key });
      },
    }),
  ),

  // GET /v1/keys/{key}
  {
    route: `GET ${KEY}`, status: 200, name: 'reads a value',
    send: async (t) => {
      await put(t, 'get/ok', { value: [1, 'two', null] });
      return t.http.get(keyPath('get/ok'));
    },
  },
  ...['"N"', 'N', 'W/"N"', '*'].map(
    (form): Case => ({
      route: `GET ${KEY}`, status: 304, name: `If-None-Match: ${form} naming the current offset`,
      send: async (t) => {
        const { body } = await put(t, 'get/etag', { value: form });
        return t.http.get(keyPath('get/etag')).set('if-none-match', form.replace('N', String(body.offset)));
      },
      check: (res) => expect(res.headers['content-length']).toBeUndefined(),
    }),
  ),
  { route: `GET ${KEY}`, status: 400, code: 'invalid_key', name: 'a key that is not UTF-8', send: (t) => t.http.get('/v1/keys/%E9') },
  { route: `GET ${KEY}`, status: 400, code: 'invalid_key', name: 'a raw / in the key', send: (t) => t.http.get('/v1/keys/a/b') },
  { route: `GET ${KEY}`, status: 404, code: 'not_found', name: 'a key never set', send: (t) => t.http.get(keyPath('get/never')) },
  {
    route: `GET ${KEY}`, status: 404, code: 'not_found', name: 'a deleted key',
    send: async (t) => {
      await gone(t, 'get/gone');
      return t.http.get(keyPath('get/gone'));
    },
  },

  // DELETE /v1/keys/{key}
  {
    route: `DELETE ${KEY}`, status: 200, name: 'deletes a live key',
    send: async (t) => {
      await put(t, 'del/ok', { value: 1 });
      return del(t, 'del/ok');
    },
  },
  {
    route: `DELETE ${KEY}`, status: 200, name: 'If-Match naming the live offset',
    send: async (t) => {
      const { body } = await put(t, 'del/cas', { value: 1 });
      return del(t, 'del/cas', { 'if-match': String(body.offset) });
    },
  },
  {
    route: `DELETE ${KEY}`, status: 200, name: 'replays the answer for a repeated Idempotency-Key',
    send: async (t) => {
      await put(t, 'del/replay', { value: 1 });
      return twice(() => del(t, 'del/replay', { 'idempotency-key': 'del-replay' }));
    },
    check: replayed,
  },
  {
    route: `DELETE ${KEY}`, status: 400, code: 'invalid_json', name: 'a malformed JSON body',
    send: (t) => t.http.delete(keyPath('del/x')).set(json).send('{"x":'),
  },
  {
    route: `DELETE ${KEY}`, status: 400, code: 'invalid_request', name: 'If-None-Match with an offset',
    send: (t) => del(t, 'del/x', { 'if-none-match': '"3"' }),
  },
  { route: `DELETE ${KEY}`, status: 400, code: 'invalid_key', name: 'an empty key', send: (t) => t.http.delete('/v1/keys/') },
  { route: `DELETE ${KEY}`, status: 404, code: 'not_found', name: 'a key never set', send: (t) => del(t, 'del/never') },
  {
    route: `DELETE ${KEY}`, status: 404, code: 'not_found', name: 'a replayed not_found',
    send: (t) => twice(() => del(t, 'del/never', { 'idempotency-key': 'del-404' })),
    check: replayed,
  },
  {
    route: `DELETE ${KEY}`, status: 412, code: 'precondition_failed', name: 'If-Match * on a deleted key',
    send: async (t) => {
      await gone(t, 'del/twice');
      return del(t, 'del/twice', { 'if-match': '*' });
    },
    check: (res) => expect(res.body.error.currentOffset).toBeNull(),
  },
  {
    route: `DELETE ${KEY}`, status: 413, code: 'payload_too_large', name: 'a body over the body limit',
    send: (t) => t.http.delete(keyPath('del/x')).set(json).send(text({ pad: 'x'.repeat(70_000) })),
  },
  {
    route: `DELETE ${KEY}`, status: 415, code: 'unsupported_media_type', name: 'a text/plain body',
    send: (t) => t.http.delete(keyPath('del/x')).set('content-type', 'text/plain').send('x'),
  },
  {
    route: `DELETE ${KEY}`, status: 422, code: 'idempotency_key_reused', name: 'an Idempotency-Key reused on another key',
    send: async (t) => {
      await del(t, 'del/a', { 'idempotency-key': 'del-reuse' });
      return del(t, 'del/b', { 'idempotency-key': 'del-reuse' });
    },
  },

  // GET /v1/keys
  {
    route: 'GET /v1/keys', status: 200, name: 'a page with more to come has a cursor',
    send: async (t) => {
      await batch(t, ['list/a', 'list/b', 'list/c'].map((key) => ({ key, value: key })));
      return t.http.get('/v1/keys').query({ prefix: 'list/', limit: 2 });
    },
    check: (res) => expect(res.body.cursor).toEqual(expect.any(String)),
  },
  {
    route: 'GET /v1/keys', status: 200, name: 'the last page has cursor null',
    send: async (t) => {
      const first = await t.http.get('/v1/keys').query({ prefix: 'list/', limit: 2 });
      return t.http.get('/v1/keys').query({ prefix: 'list/', limit: 2, cursor: first.body.cursor });
    },
    check: (res) => expect(res.body).toMatchObject({ items: [{ key: 'list/c' }], cursor: null }),
  },
  ...['foo=1', 'limit=0', 'limit=1001', 'limit=ten', 'prefix=a&prefix=b', 'cursor=not-ours', 'prefix=%01'].map(
    (query): Case => ({
      route: 'GET /v1/keys', status: 400, code: 'invalid_request', name: `query ${query}`,
      send: (t) => t.http.get(`/v1/keys?${query}`),
    }),
  ),

  // POST /v1/records
  {
    route: 'POST /v1/records', status: 200, name: 'a set, an incr and a delete',
    send: (t) => batch(t, [{ key: 'rec/a', value: 1 }, { key: 'rec/n', op: 'incr', by: 5 }, { key: 'rec/a', op: 'delete' }]),
    check: (res) => expect(res.body.records[1]).toMatchObject({ key: 'rec/n', value: 5 }),
  },
  {
    route: 'POST /v1/records', status: 200, name: 'replays the answer for a repeated Idempotency-Key',
    send: (t) => twice(() => batch(t, [{ key: 'rec/replay', op: 'incr', by: 1 }], { 'idempotency-key': 'rec-replay' })),
    check: (res) => (replayed(res), expect(res.body.records[0].value).toBe(1)),
  },
  {
    route: 'POST /v1/records', status: 400, code: 'invalid_json', name: 'malformed JSON',
    send: (t) => t.http.post('/v1/records').set(json).send('{"records":['),
  },
  { route: 'POST /v1/records', status: 400, code: 'invalid_request', name: 'no items', send: (t) => batch(t, []) },
  {
    route: 'POST /v1/records', status: 400, code: 'invalid_request', name: 'an item with both ifOffset and ifAbsent',
    send: (t) => batch(t, [{ key: 'rec/x', value: 1 }, { key: 'rec/x', value: 1, ifOffset: 1, ifAbsent: true }]),
    check: (res) => expect(res.body.error.index).toBe(1),
  },
  {
    route: 'POST /v1/records', status: 400, code: 'invalid_key', name: 'an item with an empty key',
    send: (t) => batch(t, [{ key: '', value: 1 }]),
    check: (res) => expect(res.body.error.index).toBe(0),
  },
  {
    route: 'POST /v1/records', status: 404, code: 'not_found', name: 'deleting a key an earlier item deleted',
    send: async (t) => {
      await put(t, 'rec/del', { value: 1 });
      return batch(t, [{ key: 'rec/del', op: 'delete' }, { key: 'rec/del', op: 'delete' }]);
    },
    check: (res) => expect(res.body.error.index).toBe(1),
  },
  {
    route: 'POST /v1/records', status: 412, code: 'precondition_failed', name: 'ifAbsent on a key an earlier item set',
    send: (t) => batch(t, [{ key: 'rec/cas', value: 1 }, { key: 'rec/cas', value: 2, ifAbsent: true }]),
    check: (res) => expect(res.body.error).toMatchObject({ index: 1, currentOffset: expect.any(Number) }),
  },
  {
    route: 'POST /v1/records', status: 413, code: 'payload_too_large', name: 'an item value over STATELOG_MAX_VALUE_BYTES',
    send: (t) => batch(t, [{ key: 'rec/ok', value: 1 }, { key: 'rec/big', value: 'x'.repeat(MAX_VALUE_BYTES) }]),
    check: (res) => expect(res.body.error).toMatchObject({ index: 1, limit: MAX_VALUE_BYTES }),
  },
  {
    route: 'POST /v1/records', status: 413, code: 'payload_too_large', name: 'a body over 8 × STATELOG_MAX_VALUE_BYTES + 64 KiB',
    send: (t) => batch(t, [{ key: 'rec/pad', value: 'x'.repeat(8 * MAX_VALUE_BYTES + 64 * 1024) }]),
  },
  {
    route: 'POST /v1/records', status: 415, code: 'unsupported_media_type', name: 'a form body',
    send: (t) => t.http.post('/v1/records').type('form').send({ records: 'x' }),
  },
  {
    route: 'POST /v1/records', status: 422, code: 'not_a_number', name: 'incr of a string, replayed',
    send: async (t) => {
      await put(t, 'rec/text', { value: 'ten' });
      return twice(() => batch(t, [{ key: 'rec/text', op: 'incr', by: 1 }], { 'idempotency-key': 'rec-nan' }));
    },
    check: (res) => (replayed(res), expect(res.body.error.index).toBe(0)),
  },
  {
    route: 'POST /v1/records', status: 422, code: 'not_a_number', name: 'incr beyond 2^53 - 1',
    send: (t) => batch(t, [{ key: 'rec/max', value: Number.MAX_SAFE_INTEGER }, { key: 'rec/max', op: 'incr', by: 1 }]),
    check: (res) => expect(res.body.error.index).toBe(1),
  },
  {
    route: 'POST /v1/records', status: 422, code: 'idempotency_key_reused', name: 'an Idempotency-Key reused with another batch',
    send: async (t) => {
      await batch(t, [{ key: 'rec/r', value: 1 }], { 'idempotency-key': 'rec-reuse' });
      return batch(t, [{ key: 'rec/r', value: 2 }], { 'idempotency-key': 'rec-reuse' });
    },
  },

  // Operations
  { route: 'GET /v1/stats', status: 200, name: 'the counters', send: (t) => t.http.get('/v1/stats') },
  { route: 'GET /healthz', status: 200, name: 'alive', send: (t) => t.http.get('/healthz') },
  { route: 'GET /readyz', status: 200, name: 'ready', send: (t) => t.http.get('/readyz') },
  { route: 'GET /metrics', status: 200, name: 'Prometheus text', send: (t) => t.http.get('/metrics') },
];

/** One ordinary request per documented route, for the answers every route can give (500, 503). */
const anyRequest: Record<string, (t: TestApp) => PromiseLike<Response>> = {
  [`PUT ${KEY}`]: (t) => put(t, 'any', { value: 1 }),
  [`GET ${KEY}`]: (t) => t.http.get(keyPath('any')),
  [`DELETE ${KEY}`]: (t) => del(t, 'any'),
  'GET /v1/keys': (t) => t.http.get('/v1/keys'),
  'POST /v1/records': (t) => batch(t, [{ key: 'any', op: 'incr', by: 1 }]),
  'GET /v1/stats': (t) => t.http.get('/v1/stats'),
  'GET /healthz': (t) => t.http.get('/healthz'),
  'GET /readyz': (t) => t.http.get('/readyz'),
  'GET /metrics': (t) => t.http.get('/metrics'),
};

/** Sends, checks the status (and code), then the answer against the document. */
async function exercise(t: TestApp, route: string, send: (t: TestApp) => PromiseLike<Response>, status: number, code?: string) {
  const res = await send(t);
  const [method, template] = route.split(' ') as [string, string];
  expect(res.status, res.text).toBe(status);
  if (code) expect(res.body.error.code).toBe(code);
  expectDocumented(method, template, res);
  return res;
}

describe('openapi.yaml', () => {
  it('is a valid OpenAPI 3.1 document', async () => {
    expect(loadOpenApi().openapi).toBe('3.1.0');
    // The parser reads the file itself, as any other tool would.
    const result = await validate(OPENAPI_FILE);
    expect(result.valid, result.valid ? '' : compileErrors(result)).toBe(true);
    expect(result.warnings).toEqual([]);
  });

  it('has schemas that all compile under strict Ajv (JSON Schema 2020-12)', () => {
    const pointers = schemaPointers();
    expect(pointers.length).toBeGreaterThan(40);
    for (const pointer of pointers) expect(() => schemaValidator(pointer), pointer).not.toThrow();
  });

  it('documents exactly the routes the app registers', async () => {
    const t = await startApp();
    try {
      const registered = t.app.routeTable
        .filter(({ method }) => method !== 'HEAD' && method !== 'OPTIONS')
        .map(({ method, url }) => `${method} ${url.replace(/:(\w+)/g, '{$1}')}`);
      expect([...new Set(registered)].sort()).toEqual(documentedRoutes().sort());
      expect(Object.keys(anyRequest).sort()).toEqual(documentedRoutes().sort());
    } finally {
      await t.close();
    }
  });
});

describe('the checker', () => {
  const ok = { status: 200, headers: { 'content-type': 'application/json', etag: '"1"', 'x-request-id': 'r' } };
  const entry = '{"key":"a","value":1,"offset":1,"ts":1}';

  it('accepts a documented answer', () => {
    expect(undocumented('GET', '/v1/keys/a%2Fb', { ...ok, text: entry })).toEqual([]);
  });

  it.each([
    ['an undocumented route', 'PATCH', '/v1/keys/a', { ...ok, text: entry }],
    ['an undocumented path', 'GET', '/v1/nope', { ...ok, text: entry }],
    ['an undocumented status', 'GET', '/v1/keys/a', { ...ok, status: 418, text: entry }],
    ['an extra member', 'GET', '/v1/keys/a', { ...ok, text: '{"key":"a","value":1,"offset":1,"ts":1,"x":1}' }],
    ['a missing member', 'GET', '/v1/keys/a', { ...ok, text: '{"key":"a","offset":1,"ts":1}' }],
    ['a missing required header', 'GET', '/v1/keys/a', { ...ok, headers: { ...ok.headers, etag: undefined }, text: entry }],
    ['a header that breaks its schema', 'GET', '/v1/keys/a', { ...ok, headers: { ...ok.headers, etag: 'W/"x"' }, text: entry }],
    ['an undocumented media type', 'GET', '/v1/keys/a', { ...ok, headers: { ...ok.headers, 'content-type': 'text/plain' } }],
    ['a body where none is documented', 'GET', '/v1/keys/a', { ...ok, status: 304, text: 'null' }],
    ['an unknown error code', 'GET', '/v1/keys/a', { ...ok, status: 404, text: '{"error":{"code":"gone","message":"m"}}' }],
    ['a code of another status', 'GET', '/v1/keys/a', { ...ok, status: 404, text: '{"error":{"code":"invalid_key","message":"m"}}' }],
  ])('refuses %s', (_what, method, path, answer) => {
    expect(undocumented(method, path, answer)).not.toEqual([]);
    expect(() => expectDocumented(method, path, answer)).toThrow(/disagrees with openapi.yaml|no path|has no/);
  });
});

describe('request schemas accept exactly what the server accepts', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startApp();
    await put(t, 'live', { value: 1 });
  });
  afterAll(() => t.close());

  it.each([
    [{ value: 1 }, true],
    [{ value: null }, true],
    [{}, false],
    [{ value: 1, extra: true }, false],
    [[{ value: 1 }], false],
  ])('PUT body %j: accepted %s', async (body, accepted) => {
    const res = await put(t, 'req/put', body);
    expect(res.status !== 400, res.text).toBe(accepted);
    expect(requestBodyProblems('PUT', KEY, body).length === 0).toBe(accepted);
  });

  it.each([
    [[{ key: 'k', value: 1 }], true],
    [[{ key: 'k', op: 'set', value: { a: [1] } }], true],
    [[{ key: 'live', op: 'delete', ifOffset: 0 }], true],
    [[{ key: 'k', op: 'incr', by: -1.5, ifAbsent: false }], true],
    [[{ key: 'k', value: 1, ifAbsent: true }], true],
    [[], false],
    [[{ key: 'k' }], false],
    [[{ value: 1 }], false],
    [[{ key: 1, value: 1 }], false],
    [[{ key: '', value: 1 }], false],
    [[{ key: 'a\u0000b', value: 1 }], false],
    [[{ key: 'k', op: 'delete', value: 1 }], false],
    [[{ key: 'k', op: 'incr' }], false],
    [[{ key: 'k', op: 'incr', by: 1, value: 1 }], false],
    [[{ key: 'k', value: 1, by: 1 }], false],
    [[{ key: 'k', op: 'incr', by: '1' }], false],
    [[{ key: 'k', op: 'merge', value: 1 }], false],
    [[{ key: 'k', value: 1, ifOffset: -1 }], false],
    [[{ key: 'k', value: 1, ifOffset: 1.5 }], false],
    [[{ key: 'k', value: 1, ifOffset: 1, ifAbsent: false }], false],
    [[{ key: 'k', value: 1, ttl: 1 }], false],
  ])('POST /v1/records items %j: accepted %s', async (records, accepted) => {
    const res = await batch(t, records);
    expect(res.status !== 400, res.text).toBe(accepted);
    expect(requestBodyProblems('POST', '/v1/records', { records }).length === 0).toBe(accepted);
  });

  it('refuses members besides records, in the document as on the server', async () => {
    const body = { records: [{ key: 'k', value: 1 }], atomic: true };
    expect((await t.http.post('/v1/records').set(json).send(body)).status).toBe(400);
    expect(requestBodyProblems('POST', '/v1/records', body)).not.toEqual([]);
  });
});

describe('answers match openapi.yaml', () => {
  describe('every documented status', () => {
    let t: TestApp;
    beforeAll(async () => {
      t = await startApp({ STATELOG_MAX_VALUE_BYTES: String(MAX_VALUE_BYTES) });
    });
    afterAll(() => t.close());

    it.each(cases.map((c) => [`${c.route} → ${c.status} ${c.code ?? ''}: ${c.name}`, c] as const))('%s', async (_name, c) => {
      const res = await exercise(t, c.route, c.send, c.status, c.code);
      c.check?.(res);
    });
  });

  describe('while shutting down', () => {
    let t: TestApp;
    beforeAll(async () => {
      t = await startApp();
      // What the preClose hook does when SIGTERM arrives.
      t.app.services.lifecycle.closing = true;
    });
    afterAll(() => t.close());

    it.each(Object.entries(anyRequest))('%s answers 503 unavailable with Retry-After (/healthz: 200)', async (route, send) => {
      const [status, code] = route === 'GET /healthz' ? [200] : [503, 'unavailable'];
      const res = await exercise(t, route, send, status, code);
      if (res.status === 503) expect(res.headers).toMatchObject({ 'retry-after': '1', connection: 'close' });
    });
  });

  describe('when the database fails', () => {
    let t: TestApp;
    beforeAll(async () => {
      t = await startApp();
      await t.app.services.store.close();
    });
    afterAll(() => t.close());

    const expected: Record<string, [number, string?]> = { 'GET /healthz': [200], 'GET /readyz': [503, 'unavailable'] };
    it.each(Object.entries(anyRequest))('%s answers 500 internal (/readyz: 503, /healthz: 200)', async (route, send) => {
      const [status, code] = expected[route] ?? [500, 'internal'];
      const res = await exercise(t, route, send, status, code);
      if (status >= 500) expect(res.text).not.toMatch(/\bat .+:\d+:\d+/);
    });
  });

  it('has produced every documented status of every route', () => {
    const missing = documentedResponses().filter((response) => !exercisedResponses().has(response));
    expect(missing).toEqual([]);
  });
});
