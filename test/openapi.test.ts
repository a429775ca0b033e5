// openapi.yaml against the code: the document is valid OpenAPI 3.1 and its schemas
// compile; it lists exactly the routes the app registers; its request schemas accept
// what the server accepts; it documents auth as src/http/auth.ts applies it; and real
// answers, for every documented status of every route, match it
// (test/support/openapi-responses.ts): ordinary requests, then with tokens, while the
// event loop is saturated, with readers that stop reading, while shutting down and when
// the database fails. The last test fails when a documented status was never produced here.
import http from 'node:http';
import type { Socket } from 'node:net';
import { compileErrors, validate } from '@readme/openapi-parser';
import supertest, { type Response } from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requiredRole } from '../src/http/auth.js';
import type { Role } from '../src/config.js';
import { json, startApp, tempDir, type TestApp } from './support/helpers.js';
import { writeTokenFile } from './support/token-file.js';
import { baseUrl, SseClient, untilStalled } from './support/stream-clients.js';
import { askUntil, saturate } from './support/load.js';
import {
  documentedResponses,
  documentedRoutes,
  exampleProblems,
  exercisedResponses,
  expectDocumented,
  loadOpenApi,
  OPENAPI_FILE,
  parseEventStream,
  requestBodyProblems,
  schemaPointers,
  schemaValidator,
  undocumented,
} from './support/openapi-responses.js';
import { registeredRoutes } from './support/routes.js';

const KEY = '/v1/keys/{key}';
const STREAM = 'GET /v1/changes/stream';
const MAX_VALUE_BYTES = 64;
const OTHER_EPOCH = '0123456789abcdef0123456789abcdef';

/** What a request gives back: supertest's Response, or the same read by hand for an event stream. */
type Answer = Pick<Response, 'status' | 'headers' | 'text' | 'body'>;

/** The app as one caller sees it: its requests carry that caller's token, if it has one. */
interface Caller extends TestApp {
  authorization?: string;
}

const keyPath = (key: string): string => `/v1/keys/${encodeURIComponent(key)}`;
const HISTORY = 'GET /v1/keys/{key}/history';
const historyPath = (key: string): string => `${keyPath(key)}/history`;
const text = (value: unknown): string => (typeof value === 'string' ? value : JSON.stringify(value));

function put(t: Caller, key: string, body: unknown, headers: Record<string, string> = {}) {
  return t.http.put(keyPath(key)).set({ ...json, ...headers }).send(text(body));
}

function del(t: Caller, key: string, headers: Record<string, string> = {}) {
  return t.http.delete(keyPath(key)).set(headers);
}

function batch(t: Caller, records: unknown, headers: Record<string, string> = {}) {
  return t.http.post('/v1/records').set({ ...json, ...headers }).send(text({ records }));
}

/** Sets a key, then deletes it. */
async function gone(t: Caller, key: string): Promise<void> {
  await put(t, key, { value: 1 });
  await del(t, key);
}

/** Sends the same request twice; answers the second (a replay when an Idempotency-Key is set). */
async function twice(send: () => PromiseLike<Response>): Promise<Response> {
  await send();
  return send();
}

const replayed = (res: Answer) => expect(res.headers['idempotent-replayed']).toBe('true');

function parseJson(body: string): unknown {
  try {
    return JSON.parse(body) as unknown;
  } catch {
    return undefined;
  }
}

/** The lines of an NDJSON body, parsed. */
const ndjson = (body: string): Record<string, unknown>[] =>
  body.split('\n').filter((line) => line !== '').map((line) => JSON.parse(line) as Record<string, unknown>);

/** The events of an event-stream body that have a type (the first item is `retry` alone). */
const events = (res: Answer) => parseEventStream(res.text).filter((e) => e.event !== undefined);

/**
 * GET /v1/changes/stream?query, read by hand: supertest would wait for an end that never
 * comes. An error answer is read whole; a stream is read until `read` has seen what it
 * waits for (by default, the opening comment), then dropped. Its text is what came.
 */
async function stream(
  t: Caller,
  query: string,
  headers: Record<string, string> = {},
  read: (s: SseClient) => Promise<void> = (s) => s.until(() => s.comments > 0),
): Promise<Answer> {
  const authorization: Record<string, string> = t.authorization ? { authorization: t.authorization } : {};
  const opened = await SseClient.open(`${baseUrl(t.app)}/v1/changes/stream?${query}`, { ...authorization, ...headers });
  if (!(opened instanceof SseClient)) {
    return { status: opened.status, headers: opened.headers as Answer['headers'], text: opened.body, body: parseJson(opened.body) };
  }
  try {
    await read(opened);
  } finally {
    opened.close();
  }
  return { status: 200, headers: opened.response.headers as Answer['headers'], text: opened.text, body: {} };
}

/** Waits until `count` requests wait for a commit (long polls, streams). */
async function waiters(t: TestApp, count: number): Promise<void> {
  const deadline = Date.now() + 5000;
  while (t.app.services.notifier.waiting < count) {
    if (Date.now() > deadline) throw new Error(`${t.app.services.notifier.waiting} waiting, not ${count}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** One request under test: the route it exercises ("PUT /v1/keys/{key}"), what it expects, and how to send it. */
interface Case {
  route: string;
  status: number;
  code?: string;
  name: string;
  send(t: Caller): PromiseLike<Answer>;
  check?(res: Answer): void;
}

const cases: Case[] = [
  // PUT /v1/keys/{key}
  {
    route: `PUT ${KEY}`, status: 200, name: 'sets a value; ETag is the offset',
    send: (t) => put(t, 'put/ok', { value: { balance: 150 } }),
    check: (res) => expect(res.headers.etag).toBe(`"${res.body.offset}"`),
  },
  { route: `PUT ${KEY}`, status: 200, name: 'sets a value with a time to live', send: (t) => put(t, 'put/ttl', { value: 1, ttlMs: 1000 }) },
  { route: `PUT ${KEY}`, status: 400, code: 'invalid_request', name: 'a ttlMs of 0', send: (t) => put(t, 'put/bad', { value: 1, ttlMs: 0 }) },
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
  {
    route: `GET ${KEY}`, status: 200, name: 'reads a value with a TTL and its expiresAt',
    send: async (t) => {
      await put(t, 'get/ttl', { value: 1, ttlMs: 60_000 });
      return t.http.get(keyPath('get/ttl'));
    },
    check: (res) => expect(res.body.expiresAt).toBeGreaterThan(Date.now()),
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

  // GET /v1/keys/{key}/history
  {
    route: HISTORY, status: 200, name: 'a full page has next',
    send: async (t) => {
      for (const value of [1, 2, 3]) await put(t, 'hist/a', { value });
      await del(t, 'hist/a');
      return t.http.get(historyPath('hist/a')).query({ limit: 3 });
    },
    check: (res) => expect(res.body.next).toBe(res.body.records[2].offset),
  },
  {
    route: HISTORY, status: 200, name: 'the last page has next null; an unknown key, no records',
    send: (t) => t.http.get(historyPath('hist/never')),
    check: (res) => expect(res.body).toMatchObject({ records: [], next: null }),
  },
  ...['foo=1', 'limit=0', 'limit=1001', 'before=0', 'before=x'].map(
    (query): Case => ({
      route: HISTORY, status: 400, code: 'invalid_request', name: `query ${query}`,
      send: (t) => t.http.get(`${historyPath('hist/a')}?${query}`),
    }),
  ),
  { route: HISTORY, status: 400, code: 'invalid_key', name: 'a key over 512 bytes', send: (t) => t.http.get(historyPath('k'.repeat(513))) },

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
    route: 'POST /v1/records', status: 409, code: 'out_of_range', name: 'a guarded incr below its min, replayed',
    send: async (t) => {
      await put(t, 'rec/balance', { value: 2 });
      return twice(() => batch(t, [{ key: 'rec/other', op: 'incr', by: 1 }, { key: 'rec/balance', op: 'incr', by: -3, min: 0 }], { 'idempotency-key': 'rec-range' }));
    },
    check: (res) => (replayed(res), expect(res.body.error).toMatchObject({ index: 1, value: 2, offset: expect.any(Number) })),
  },
  {
    route: 'POST /v1/records', status: 409, code: 'out_of_range', name: 'a guarded incr of an absent key above its max',
    send: (t) => batch(t, [{ key: 'rec/absent-counter', op: 'incr', by: 2, max: 1 }]),
    check: (res) => expect(res.body.error).toMatchObject({ index: 0, value: null, offset: null }),
  },
  {
    route: 'POST /v1/records', status: 400, code: 'invalid_request', name: 'an incr whose min is above its max',
    send: (t) => batch(t, [{ key: 'rec/x', op: 'incr', by: 1, min: 2, max: 1 }]),
    check: (res) => expect(res.body.error.index).toBe(0),
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

  // GET /v1/snapshot
  {
    route: 'GET /v1/snapshot', status: 200, name: 'the live keys of the prefix in byte order, then the last line',
    send: async (t) => {
      await batch(t, [{ key: 'snap/b', value: 2 }, { key: 'snap/a', value: [1] }, { key: 'snap/c', value: 3 }]);
      await del(t, 'snap/c');
      return t.http.get('/v1/snapshot').query({ prefix: 'snap/' });
    },
    check: (res) => {
      const lines = ndjson(res.text);
      expect(lines.map((line) => line.key)).toEqual(['snap/a', 'snap/b', undefined]);
      const offset = Number(res.headers['x-log-offset']);
      expect(lines.at(-1)).toEqual({ end: true, offset, count: 2, epoch: res.headers['x-log-epoch'], digest: expect.stringMatching(/^[0-9a-f]{16}$/) });
      expect(res.headers['cache-control']).toBe('no-store');
    },
  },
  {
    route: 'GET /v1/snapshot', status: 200, name: 'no live key with the prefix: the last line alone',
    send: (t) => t.http.get('/v1/snapshot').query({ prefix: 'snap/none/' }),
    check: (res) => expect(ndjson(res.text)).toEqual([expect.objectContaining({ end: true, count: 0 })]),
  },
  {
    route: 'GET /v1/snapshot', status: 200, name: 'minOffset: a state at that offset or later, for caches to keep',
    send: async (t) => {
      const { body } = await put(t, 'snap/min', { value: 1 });
      return t.http.get('/v1/snapshot').query({ prefix: 'snap/', minOffset: body.offset });
    },
    check: (res) => {
      expect(res.headers['cache-control']).toBe('public, max-age=10');
      expect(res.headers.etag).toBe(`"${res.headers['x-log-epoch']}:${res.headers['x-log-offset']}"`);
    },
  },
  {
    route: 'GET /v1/snapshot', status: 304, name: 'If-None-Match names a state the request accepts',
    send: async (t) => {
      const first = await t.http.get('/v1/snapshot').query({ prefix: 'snap/' });
      return t.http.get('/v1/snapshot').query({ prefix: 'snap/', minOffset: 0 }).set('if-none-match', first.headers.etag as string);
    },
    check: (res) => expect(res.text).toBe(''),
  },
  {
    route: 'GET /v1/snapshot', status: 410, code: 'offset_ahead', name: 'minOffset beyond the head',
    send: async (t) => {
      const { body } = await put(t, 'snap/ahead', { value: 1 });
      return t.http.get('/v1/snapshot').query({ minOffset: body.offset + 1000 });
    },
  },
  ...['prefix=%01', 'limit=5', 'prefix=a&prefix=b', 'minOffset=-1', 'minOffset=x'].map(
    (query): Case => ({
      route: 'GET /v1/snapshot', status: 400, code: 'invalid_request', name: `query ${query}`,
      send: (t) => t.http.get(`/v1/snapshot?${query}`),
    }),
  ),

  // GET /v1/changes
  {
    route: 'GET /v1/changes', status: 200, name: 'a full page: next is its last record',
    send: async (t) => {
      const { body } = await batch(t, ['ch/a', 'ch/b', 'ch/c'].map((key) => ({ key, value: key })));
      return t.http.get('/v1/changes').query({ after: body.offset - 3, limit: 2 });
    },
    check: (res) => {
      expect(res.body.records.map((r: { key: string }) => r.key)).toEqual(['ch/a', 'ch/b']);
      expect(res.body.next).toBe(res.body.records[1].offset);
      expect(res.body.head).toBeGreaterThan(res.body.next);
    },
  },
  {
    route: 'GET /v1/changes', status: 200, name: 'a filtered page that is not full: next is the head; delete markers included',
    send: async (t) => {
      const { body } = await batch(t, [
        { key: 'ch/x/1', value: 1 }, { key: 'ch/y/1', value: 1 }, { key: 'ch/x/1', op: 'delete' }, { key: 'ch/y/2', value: 2 },
      ]);
      return t.http.get('/v1/changes').query({ after: body.offset - 4, prefix: 'ch/x/' });
    },
    check: (res) => {
      expect(res.body.records.map((r: { op: string }) => r.op)).toEqual(['set', 'delete']);
      expect(res.body.records[1]).not.toHaveProperty('value');
      expect(res.body.next).toBe(res.body.head);
      expect(res.body.next).toBe(res.body.records[1].offset + 1);
    },
  },
  {
    route: 'GET /v1/changes', status: 200, name: 'a long poll answered when a record of its prefix commits',
    send: async (t) => {
      const { body } = await put(t, 'ch/poll/other', { value: 0 });
      const poll = t.http.get('/v1/changes').query({ after: body.offset, prefix: 'ch/poll/mine', wait: 20 }).then((res) => res);
      await waiters(t, 1);
      await put(t, 'ch/poll/other', { value: 1 });
      await waiters(t, 1);
      await put(t, 'ch/poll/mine', { value: 2 });
      return poll;
    },
    check: (res) => expect(res.body.records).toEqual([expect.objectContaining({ key: 'ch/poll/mine', value: 2 })]),
  },
  {
    route: 'GET /v1/changes', status: 200, name: 'a long poll whose wait ends: no records, next is the head',
    send: async (t) => {
      const { body } = await put(t, 'ch/quiet', { value: 1 });
      return t.http.get('/v1/changes').query({ after: body.offset - 1, prefix: 'ch/none/', wait: 0.2 });
    },
    check: (res) => expect(res.body).toMatchObject({ records: [], next: res.body.head }),
  },
  ...[
    'limit=0', 'limit=10001', 'wait=61', 'wait=-1', 'wait=soon', 'after=-1', 'after=1.5', 'after=9007199254740992',
    'prefix=%7F', 'epoch=', 'cursor=x', 'after=1&after=2',
  ].map(
    (query): Case => ({
      route: 'GET /v1/changes', status: 400, code: 'invalid_request', name: `query ${query}`,
      send: (t) => t.http.get(`/v1/changes?${query}`),
    }),
  ),
  {
    route: 'GET /v1/changes', status: 410, code: 'offset_ahead', name: 'after beyond the head',
    send: async (t) => {
      const { body } = await put(t, 'ch/ahead', { value: 1 });
      return t.http.get('/v1/changes').query({ after: body.offset + 1000 });
    },
    check: (res) => expect(res.body.error.head).toEqual(expect.any(Number)),
  },
  {
    route: 'GET /v1/changes', status: 410, code: 'epoch_changed', name: 'another epoch',
    send: (t) => t.http.get('/v1/changes').query({ epoch: OTHER_EPOCH }),
    check: (res) => expect(res.body.error.epoch).toMatch(/^[0-9a-f]{32}$/),
  },
  {
    route: 'GET /v1/changes', status: 410, code: 'offset_compacted', name: 'after below the horizon (a delete marker compacted away)',
    send: async (t) => {
      const { body } = await batch(t, [{ key: 'ch/gone', value: 1 }, { key: 'ch/gone', op: 'delete' }]);
      expect((await t.http.post('/v1/admin/compact')).body.horizon).toBeGreaterThanOrEqual(body.offset);
      return t.http.get('/v1/changes').query({ after: body.offset - 1 });
    },
    check: (res) => expect(res.body.error.horizon).toBeGreaterThan(0),
  },

  // GET /v1/changes/stream
  {
    route: STREAM, status: 200, name: 'records of the prefix, then progress past the others',
    send: async (t) => {
      const { body } = await batch(t, [{ key: 'st/a/1', value: 1 }, { key: 'st/b/1', value: 2 }]);
      return stream(t, `after=${body.offset - 2}&prefix=st/a/`, {}, (s) => s.until((e) => e.some((event) => event.event === 'progress')));
    },
    check: (res) => {
      expect(parseEventStream(res.text)[0]).toEqual({ retry: 1000 });
      const [record, progress] = events(res);
      expect(JSON.parse(record!.data!)).toMatchObject({ key: 'st/a/1', op: 'set', value: 1, offset: Number(record!.id) });
      // Past the other prefix's record at least; further if anything else was written since.
      const at = Number(progress!.id);
      expect(at).toBeGreaterThanOrEqual(Number(record!.id) + 1);
      expect(progress).toEqual({ id: String(at), event: 'progress', data: `{"offset":${at}}` });
      expect(res.headers['x-log-epoch']).toMatch(/^[0-9a-f]{32}$/);
    },
  },
  {
    route: STREAM, status: 200, name: 'snapshot=true: the live keys without ids, snapshot-end, then the records after it',
    send: async (t) => {
      await batch(t, [{ key: 'st/s/1', value: 1 }, { key: 'st/s/2', value: 2 }, { key: 'st/s/1', op: 'delete' }]);
      return stream(t, 'snapshot=true&prefix=st/s/', {}, async (s) => {
        await s.until((e) => e.some((event) => event.event === 'snapshot-end'));
        await put(t, 'st/s/3', { value: 3 });
        await s.until((e) => e.at(-1)?.event === 'record' && e.at(-1)?.id !== undefined);
      });
    },
    check: (res) => {
      const [snapshot, end, live] = events(res);
      expect([snapshot?.id, end?.event, live?.event]).toEqual([undefined, 'snapshot-end', 'record']);
      expect(JSON.parse(snapshot!.data!)).toMatchObject({ key: 'st/s/2', op: 'set', value: 2 });
      expect(JSON.parse(live!.data!)).toMatchObject({ key: 'st/s/3', op: 'set', value: 3 });
      expect(Number(live!.id)).toBeGreaterThan(Number(end!.id));
    },
  },
  {
    route: STREAM, status: 200, name: 'Last-Event-ID resumes after it, whatever after says',
    send: async (t) => {
      const { body } = await batch(t, [{ key: 'st/r', value: 1 }, { key: 'st/r', value: 2 }]);
      const resume = { 'last-event-id': String(body.offset - 1) };
      return stream(t, 'after=0&prefix=st/r', resume, (s) => s.until((e) => e.length > 0));
    },
    check: (res) => expect(JSON.parse(events(res)[0]!.data!)).toMatchObject({ key: 'st/r', value: 2 }),
  },
  ...[
    ['snapshot=true&after=0', {}], ['snapshot=maybe', {}], ['after=-1', {}], ['prefix=%00', {}], ['after=1&after=2', {}],
    ['', { 'last-event-id': 'abc' }], ['', { 'last-event-id': '1 2' }],
  ].map(
    ([query, headers]): Case => ({
      route: STREAM, status: 400, code: 'invalid_request', name: `query ${query} ${JSON.stringify(headers)}`,
      send: (t) => stream(t, query as string, headers as Record<string, string>),
    }),
  ),
  ...(
    [
      ['offset_ahead', 'after beyond the head', async (t) => {
        const { body } = await put(t, 'st/ahead', { value: 1 });
        return [`after=${body.offset + 1000}`, {}];
      }],
      ['epoch_changed', 'snapshot=true for another epoch', async () => [`snapshot=true&epoch=${OTHER_EPOCH}`, {}]],
      ['offset_compacted', 'a Last-Event-ID below the horizon', async (t) => {
        const { body } = await batch(t, [{ key: 'st/gone', value: 1 }, { key: 'st/gone', op: 'delete' }]);
        await t.http.post('/v1/admin/compact');
        return ['after=0', { 'last-event-id': String(body.offset - 1) }];
      }],
    ] as [string, string, (t: Caller) => Promise<[string, Record<string, string>]>][]
  ).map(
    ([code, name, position]): Case => ({
      route: STREAM, status: 200, name: `event: reset for ${name} (${code}), then the end`,
      send: async (t) => {
        const [query, headers] = await position(t);
        return stream(t, query, headers, (s) => s.ended);
      },
      check: (res) => {
        const received = events(res);
        expect(received.map((e) => e.event)).toEqual(['reset']);
        const { error } = JSON.parse(received[0]!.data!);
        expect(error).toMatchObject({ code, horizon: expect.any(Number), epoch: expect.stringMatching(/^[0-9a-f]{32}$/) });
      },
    }),
  ),
  {
    route: STREAM, status: 200, name: 'query parameters it does not take are ignored',
    send: (t) => stream(t, 'after=0&_=1764400000000&limit=10'),
  },

  // /v1/consumers
  {
    route: 'PUT /v1/consumers/{name}', status: 200, name: 'a commit with a hold',
    send: async (t) => {
      await put(t, 'cons/a', { value: 1 });
      return t.http.put('/v1/consumers/doc-worker').set(json).send(text({ offset: 1, hold: true }));
    },
    check: (res) => (expect(res.body).toMatchObject({ name: 'doc-worker', offset: 1, hold: true }), expect(res.headers.etag).toBe('"1"')),
  },
  {
    route: 'GET /v1/consumers/{name}', status: 200, name: 'a consumer with its lag',
    send: (t) => t.http.get('/v1/consumers/doc-worker'),
    check: (res) => expect(res.body).toMatchObject({ name: 'doc-worker', offset: 1, lag: expect.any(Number) }),
  },
  {
    route: 'GET /v1/consumers', status: 200, name: 'every consumer',
    send: (t) => t.http.get('/v1/consumers'),
    check: (res) => expect(res.body.consumers.map((c: { name: string }) => c.name)).toContain('doc-worker'),
  },
  {
    route: 'GET /v1/consumers/{name}', status: 400, code: 'invalid_key', name: 'a name with a control character',
    send: (t) => t.http.get('/v1/consumers/a%01b'),
  },
  {
    route: 'GET /v1/consumers/{name}', status: 404, code: 'not_found', name: 'a consumer never committed',
    send: (t) => t.http.get('/v1/consumers/doc-nobody'),
  },
  {
    route: 'PUT /v1/consumers/{name}', status: 400, code: 'invalid_request', name: 'an offset that is not a whole number',
    send: (t) => t.http.put('/v1/consumers/doc-worker').set(json).send(text({ offset: 1.5 })),
  },
  {
    route: 'PUT /v1/consumers/{name}', status: 409, code: 'conflict', name: 'an offset behind the committed one',
    send: (t) => t.http.put('/v1/consumers/doc-worker').set(json).send(text({ offset: 0 })),
    check: (res) => expect(res.body.error.currentOffset).toBe(1),
  },
  {
    route: 'PUT /v1/consumers/{name}', status: 410, code: 'offset_ahead', name: 'an offset beyond the head',
    send: (t) => t.http.put('/v1/consumers/doc-worker').set(json).send(text({ offset: Number.MAX_SAFE_INTEGER })),
  },
  {
    route: 'PUT /v1/consumers/{name}', status: 410, code: 'epoch_changed', name: 'an offset of another epoch',
    send: (t) => t.http.put('/v1/consumers/doc-worker').set(json).send(text({ offset: 1, epoch: OTHER_EPOCH })),
  },
  {
    route: 'PUT /v1/consumers/{name}', status: 412, code: 'precondition_failed', name: 'If-None-Match * on a consumer that exists',
    send: (t) => t.http.put('/v1/consumers/doc-worker').set({ ...json, 'if-none-match': '*' }).send(text({ offset: 1 })),
    check: (res) => expect(res.body.error.currentOffset).toBe(1),
  },
  {
    route: 'PUT /v1/consumers/{name}', status: 413, code: 'payload_too_large', name: 'a body over the body limit',
    send: (t) => t.http.put('/v1/consumers/doc-worker').set(json).send(text({ offset: 1, pad: 'x'.repeat(70_000) })),
  },
  {
    route: 'PUT /v1/consumers/{name}', status: 415, code: 'unsupported_media_type', name: 'a text/plain body',
    send: (t) => t.http.put('/v1/consumers/doc-worker').set('content-type', 'text/plain').send('1'),
  },
  {
    route: 'DELETE /v1/consumers/{name}', status: 400, code: 'invalid_request', name: 'a bad If-Match',
    send: (t) => t.http.delete('/v1/consumers/doc-worker').set('if-match', 'soon'),
  },
  {
    route: 'DELETE /v1/consumers/{name}', status: 412, code: 'precondition_failed', name: 'If-Match naming another offset',
    send: (t) => t.http.delete('/v1/consumers/doc-worker').set('if-match', '"7"'),
  },
  {
    route: 'DELETE /v1/consumers/{name}', status: 204, name: 'a consumer deleted',
    send: (t) => t.http.delete('/v1/consumers/doc-worker').set('if-match', '"1"'),
  },
  {
    route: 'DELETE /v1/consumers/{name}', status: 404, code: 'not_found', name: 'a consumer deleted before',
    send: (t) => t.http.delete('/v1/consumers/doc-worker'),
  },

  // POST /v1/admin/compact
  {
    route: 'POST /v1/admin/compact', status: 200, name: 'removes superseded records and expired delete markers',
    send: async (t) => {
      await batch(t, [{ key: 'cmp/a', value: 1 }, { key: 'cmp/a', value: 2 }, { key: 'cmp/b', value: 1 }, { key: 'cmp/b', op: 'delete' }]);
      return t.http.post('/v1/admin/compact');
    },
    check: (res) => {
      expect(res.body.removed).toBeGreaterThanOrEqual(3);
      expect(res.body.tombstonesRemoved).toBeGreaterThanOrEqual(1);
      expect(res.body.horizon).toBe(res.body.head);
    },
  },
  {
    route: 'GET /v1/stats', status: 200, name: 'lastCompaction after a run',
    send: (t) => t.http.get('/v1/stats'),
    check: (res) => expect(res.body.lastCompaction).toMatchObject({ trigger: 'admin', removed: expect.any(Number) }),
  },
  {
    route: 'POST /v1/admin/compact', status: 400, code: 'invalid_json', name: 'a body that is not JSON',
    send: (t) => t.http.post('/v1/admin/compact').set(json).send('{'),
  },
  {
    route: 'POST /v1/admin/compact', status: 413, code: 'payload_too_large', name: 'a body over the body limit',
    send: (t) => t.http.post('/v1/admin/compact').set(json).send(text({ pad: 'x'.repeat(70_000) })),
  },
  {
    route: 'POST /v1/admin/compact', status: 415, code: 'unsupported_media_type', name: 'a text/plain body',
    send: (t) => t.http.post('/v1/admin/compact').set('content-type', 'text/plain').send('now'),
  },
  {
    route: 'POST /v1/admin/compact', status: 503, code: 'unavailable', name: 'a run that fails (removal refused by the database)',
    send: async (t) => {
      await batch(t, [{ key: 'cmp/fail', value: 1 }, { key: 'cmp/fail', value: 2 }]);
      const restore = await t.database.failCompaction('injected');
      try {
        return await t.http.post('/v1/admin/compact');
      } finally {
        await restore();
      }
    },
    check: (res) => expect(res.headers['retry-after']).toBe('1'),
  },
];

/** One ordinary request per documented route, for the answers every route can give (401, 403, 500, 503). */
const anyRequest: Record<string, (t: Caller) => PromiseLike<Answer>> = {
  [`PUT ${KEY}`]: (t) => put(t, 'any', { value: 1 }),
  [`GET ${KEY}`]: (t) => t.http.get(keyPath('any')),
  [`DELETE ${KEY}`]: (t) => del(t, 'any'),
  'GET /v1/keys': (t) => t.http.get('/v1/keys'),
  [HISTORY]: (t) => t.http.get(historyPath('any')),
  'POST /v1/records': (t) => batch(t, [{ key: 'any', op: 'incr', by: 1 }]),
  'GET /v1/stats': (t) => t.http.get('/v1/stats'),
  'GET /healthz': (t) => t.http.get('/healthz'),
  'GET /readyz': (t) => t.http.get('/readyz'),
  'GET /metrics': (t) => t.http.get('/metrics'),
  'GET /v1/snapshot': (t) => t.http.get('/v1/snapshot'),
  'GET /v1/changes': (t) => t.http.get('/v1/changes'),
  // With a snapshot: a stream that fails to open answers, where a plain one would be cut.
  [STREAM]: (t) => stream(t, 'snapshot=true'),
  'POST /v1/admin/compact': (t) => t.http.post('/v1/admin/compact'),
  'GET /v1/consumers': (t) => t.http.get('/v1/consumers'),
  'GET /v1/consumers/{name}': (t) => t.http.get('/v1/consumers/any'),
  'PUT /v1/consumers/{name}': (t) => t.http.put('/v1/consumers/any').set(json).send(text({ offset: 0 })),
  'DELETE /v1/consumers/{name}': (t) => t.http.delete('/v1/consumers/any'),
};

/** Routes where each scoped token has names of its own instead of prefixes: never outside them. */
const perToken = (route: string): boolean => route.includes(' /v1/consumers');

/** With a token limited to key prefixes that hold none of these keys: one request per route reaching outside them. */
const outsideScope: Record<string, (t: Caller) => PromiseLike<Answer>> = {
  ...Object.fromEntries(Object.entries(anyRequest).filter(([route]) => !perToken(route))),
  'GET /v1/keys': (t) => t.http.get('/v1/keys?prefix=any'),
  'GET /v1/snapshot': (t) => t.http.get('/v1/snapshot?prefix=any'),
  'GET /v1/changes': (t) => t.http.get('/v1/changes?key=any'),
  [STREAM]: (t) => stream(t, 'prefix=any'),
};

/** Checks the status (and code) of an answer, then the answer against the document. */
function verify(route: string, res: Answer, status: number, code?: string): Answer {
  const [method, template] = route.split(' ') as [string, string];
  expect(res.status, res.text.slice(0, 2000)).toBe(status);
  if (code) expect(res.body.error.code).toBe(code);
  expectDocumented(method, template, res);
  return res;
}

/** Sends, then verifies. */
async function exercise(t: Caller, route: string, send: (t: Caller) => PromiseLike<Answer>, status: number, code?: string) {
  return verify(route, await send(t), status, code);
}

/** The role a documented operation needs, as src/http/auth.ts decides it (null: none). */
function roleFor(route: string): Role | null {
  const [method, template] = route.split(' ') as [string, string];
  return requiredRole(method, template.replace(/\{(\w+)\}/g, ':$1'), template);
}

const ROLES: Role[] = ['read', 'write', 'admin'];

describe('openapi.yaml', () => {
  it('is a valid OpenAPI 3.1 document', async () => {
    expect(loadOpenApi().openapi).toBe('3.1.0');
    // The parser reads the file itself, as any other tool would.
    const result = await validate(OPENAPI_FILE);
    expect(result.valid, result.valid ? '' : compileErrors(result)).toBe(true);
    expect(result.warnings).toEqual([]);
  });

  it('has examples that match their schemas', () => {
    expect(exampleProblems()).toEqual([]);
  });

  it('has schemas that all compile under strict Ajv (JSON Schema 2020-12)', () => {
    const pointers = schemaPointers();
    expect(pointers.length).toBeGreaterThan(40);
    for (const pointer of pointers) expect(() => schemaValidator(pointer), pointer).not.toThrow();
  });

  it('documents exactly the routes the app registers', async () => {
    const t = await startApp();
    try {
      const registered = registeredRoutes(t.app)
        .filter(({ method, url }) => method !== 'HEAD' && method !== 'OPTIONS' && !url.startsWith('/ui'))
        .map(({ method, url }) => `${method} ${url.replace(/:(\w+)/g, '{$1}')}`);
      // The dashboard's routes: test/ui/ui-routes.test.ts checks them against this document.
      expect([...new Set(registered)].sort()).toEqual(documentedRoutes().sort());
      expect(Object.keys(anyRequest).sort()).toEqual(documentedRoutes().sort());
    } finally {
      await t.close();
    }
  });

  it('documents auth as src/http/auth.ts applies it: 401 and 403 (a lower role, or key prefixes) where a token is needed', () => {
    const document = loadOpenApi();
    const statuses = new Set(documentedResponses());
    for (const route of documentedRoutes()) {
      const [method, template] = route.split(' ') as [string, string];
      const role = roleFor(route);
      const security = (document.paths[template]![method.toLowerCase()] as { security?: unknown }).security ?? document.security;
      expect([route, security]).toEqual([route, role === null ? [] : [{ bearer: [] }, { clientCertificate: [] }]]);
      expect([route, statuses.has(`${route} 401`)]).toEqual([route, role !== null]);
      // Every route a token reaches may refuse a token with key prefixes; those with names per
      // token refuse only a lower role.
      expect([route, statuses.has(`${route} 403`)]).toEqual([route, role !== null && (!perToken(route) || role !== 'read')]);
    }
  });
});

describe('the checker', () => {
  const ok = { status: 200, headers: { 'content-type': 'application/json', etag: '"1"', 'x-request-id': 'r' } };
  const entry = '{"key":"a","value":1,"offset":1,"ts":1}';
  const epoch = '0123456789abcdef0123456789abcdef';
  const snapshotEnd = `{"end":true,"offset":1,"count":1,"epoch":"${epoch}","digest":"0123456789abcdef"}`;
  const streamed = { 'x-log-epoch': epoch, 'cache-control': 'no-store', 'x-request-id': 'r' };
  const snapshot = {
    status: 200,
    headers: { ...streamed, 'content-type': 'application/x-ndjson; charset=utf-8', 'x-log-offset': '1', etag: `"${epoch}:1"` },
    text: `${entry}\n${snapshotEnd}\n`,
  };
  const sse = {
    status: 200,
    headers: { ...streamed, 'content-type': 'text/event-stream; charset=utf-8', 'x-accel-buffering': 'no' },
    text: [
      'retry: 1000\n\n: hello\n\n',
      'id: 1\nevent: record\ndata: {"offset":1,"key":"a","op":"delete","ts":1}\n\n',
      'id: 2\nevent: progress\ndata: {"offset":2}\n\n',
      'event: reset\ndata: {"error":{"code":"offset_compacted","message":"m","horizon":3}}\n\n',
      'id: 4\nevent: record\ndata: {"off',
    ].join(''),
  };
  const compaction = '{"removed":1,"tombstonesRemoved":0,"durationMs":1.5,"horizon":0,"head":2}';
  const lastCompaction = JSON.stringify({
    trigger: 'admin', startedAt: 1, durationMs: 1.5, removed: 1, tombstonesRemoved: 0, horizon: 0, head: 2, bytesBefore: 9, bytesAfter: 8,
  });
  const stats = JSON.stringify({
    head: 2, records: 1, liveKeys: 1, expiredKeys: 0, tombstones: 0, dirtyRatio: 0, horizon: 0, dbBytes: 8, digest: '00000000000000ff', digestOffset: 2,
    lastCompaction: JSON.parse(lastCompaction), maxValueBytes: 64, maxBatchBytes: 66048,
  });
  const gone = (code: string) => `{"error":{"code":"${code}","message":"m"}}`;

  it('accepts a documented answer', () => {
    expect(undocumented('GET', '/v1/keys/a%2Fb', { ...ok, text: entry })).toEqual([]);
  });

  it.each([
    ['a snapshot', 'GET', '/v1/snapshot', snapshot],
    ['an event stream, its unfinished last event left out', 'GET', '/v1/changes/stream', sse],
    ['a compaction result', 'POST', '/v1/admin/compact', { ...ok, text: compaction }],
    ['stats with lastCompaction', 'GET', '/v1/stats', { ...ok, text: stats }],
  ])('accepts %s', (_what, method, path, answer) => {
    expect(undocumented(method, path, answer)).toEqual([]);
  });

  it('reads event streams as the standard says', () => {
    const body = ': c\r\nretry: 5\r\n\r\nid:7\revent: x\rdata: a\rdata:  b\rfoo: 1\r\rdata\n\n: only a comment\n\nretry: x\n\ndata: cut';
    expect(parseEventStream(body)).toEqual([
      { retry: 5 },
      { id: '7', event: 'x', data: 'a\n b' },
      { data: '' },
    ]);
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
    ['a 410 offset_compacted without its horizon', 'GET', '/v1/changes', { ...ok, status: 410, text: gone('offset_compacted') }],
    ['a 410 epoch_changed without the epoch', 'GET', '/v1/changes', { ...ok, status: 410, text: gone('epoch_changed') }],
    ['a 401 without WWW-Authenticate', 'GET', '/v1/stats', { ...ok, status: 401, text: '{"error":{"code":"unauthorized","message":"m"}}' }],
    ['a snapshot without its last line', 'GET', '/v1/snapshot', { ...snapshot, text: `${entry}\n` }],
    ['a snapshot with two last lines', 'GET', '/v1/snapshot', { ...snapshot, text: `${snapshotEnd}\n${snapshotEnd}\n` }],
    ['a snapshot line that is not JSON', 'GET', '/v1/snapshot', { ...snapshot, text: `${entry}\n{\n${snapshotEnd}\n` }],
    ['no X-Log-Offset', 'GET', '/v1/snapshot', { ...snapshot, headers: { ...streamed, 'content-type': 'application/x-ndjson' } }],
    ['a stream event of an unknown type', 'GET', '/v1/changes/stream', { ...sse, text: 'event: ping\ndata: {}\n\n' }],
    ['a record event not a record', 'GET', '/v1/changes/stream', { ...sse, text: 'id: 1\nevent: record\ndata: {"offset":1}\n\n' }],
    ['a record event whose data is not JSON', 'GET', '/v1/changes/stream', { ...sse, text: 'id: 1\nevent: record\ndata: {\n\n' }],
    ['a progress event without an id', 'GET', '/v1/changes/stream', { ...sse, text: 'event: progress\ndata: {"offset":1}\n\n' }],
    ['a compaction result with an extra member', 'POST', '/v1/admin/compact', { ...ok, text: compaction.replace('{', '{"extra":1,') }],
    ['an unknown compaction trigger', 'GET', '/v1/stats', { ...ok, text: stats.replace('"admin"', '"cron"') }],
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

/** A GET whose reader takes the answer's headers, then stops reading. */
interface StalledReader {
  response: http.IncomingMessage;
  /** The server's end of the connection. */
  socket: Socket;
  /** Reads on to the end of the answer; resolves with all of it. */
  readToEnd(): Promise<string>;
  close(): void;
}

async function stalledRead(t: TestApp, path: string): Promise<StalledReader> {
  const socket = new Promise<Socket>((resolve) => t.app.server.once('connection', resolve));
  const { request, response } = await new Promise<{ request: http.ClientRequest; response: http.IncomingMessage }>((resolve, reject) => {
    const request = http.get(`${baseUrl(t.app)}${path}`, { agent: false }, (response) => {
      // At once: a client that reads grows its socket's receive buffer.
      response.pause();
      resolve({ request, response });
    });
    request.on('error', reject);
  });
  response.setEncoding('utf8');
  return {
    response,
    socket: await socket,
    readToEnd: () =>
      new Promise((resolve, reject) => {
        let text = '';
        response.on('data', (chunk: string) => (text += chunk));
        response.on('end', () => resolve(text));
        response.on('error', reject);
        response.resume();
      }),
    close: () => request.destroy(),
  };
}

describe('answers match openapi.yaml', () => {
  describe('every documented status', () => {
    let t: TestApp;
    beforeAll(async () => {
      // Delete markers expire at once, so that a compaction moves the horizon.
      t = await startApp({ STATELOG_MAX_VALUE_BYTES: String(MAX_VALUE_BYTES), STATELOG_TOMBSTONE_RETENTION_MS: '0' });
    });
    afterAll(() => t.close());

    it.for(cases.map((c) => [`${c.route} → ${c.status} ${c.code ?? ''}: ${c.name}`, c] as const))('%s', async ([, c]) => {
      const res = await exercise(t, c.route, c.send, c.status, c.code);
      c.check?.(res);
    });
  });

  describe('with STATELOG_TOKENS set', () => {
    const TOKENS: Record<Role, string> = { read: 'tok-read', write: 'tok-write', admin: 'tok-admin' };
    let t: TestApp;
    beforeAll(async () => {
      t = await startApp({ STATELOG_TOKENS: ROLES.map((role) => `${role}:${TOKENS[role]}`).join(',') });
    });
    afterAll(() => t.close());

    /** The app as the holder of `token` sees it. */
    const as = (token: string | undefined): Caller => {
      if (token === undefined) return t;
      const authorization = `Bearer ${token}`;
      return { ...t, http: supertest.agent(t.app.server).set('authorization', authorization), authorization };
    };

    it.each(Object.entries(anyRequest))(
      '%s without a token: 401 unauthorized with WWW-Authenticate (/healthz, /readyz: 200)',
      async (route, send) => {
        const open = roleFor(route) === null;
        const res = await exercise(as(undefined), route, send, open ? 200 : 401, open ? undefined : 'unauthorized');
        if (!open) expect(res.headers['www-authenticate']).toBe('Bearer');
      },
    );

    it.each(Object.entries(anyRequest).filter(([route]) => roleFor(route) !== null))(
      '%s with a token that is not configured: 401 unauthorized',
      async (route, send) => {
        await exercise(as('tok-wrong'), route, send, 401, 'unauthorized');
      },
    );

    const below = Object.entries(anyRequest).flatMap(([route, send]) => {
      const needed = roleFor(route);
      return needed === null ? [] : ROLES.slice(0, ROLES.indexOf(needed)).map((role) => [route, role, needed, send] as const);
    });
    it.each(below)('%s with a %s token: 403 forbidden (needs %s)', async (route, role, _needed, send) => {
      await exercise(as(TOKENS[role]), route, send, 403, 'forbidden');
    });
  });

  describe('with a token limited to key prefixes (STATELOG_TOKENS_FILE)', () => {
    let t: TestApp;
    const secret = 'tok-scoped';
    beforeAll(async () => {
      const dir = tempDir();
      t = await startApp({ STATELOG_TOKENS_FILE: writeTokenFile(dir, [{ name: 'scoped', secret, role: 'admin', prefixes: ['mine/'] }]) }, { dir });
    });
    afterAll(() => t.close());

    it.each(Object.entries(outsideScope).filter(([route]) => roleFor(route) !== null))('%s outside its prefixes: 403 forbidden', async (route, send) => {
      const scoped: Caller = { ...t, http: supertest.agent(t.app.server).set('authorization', `Bearer ${secret}`), authorization: `Bearer ${secret}` };
      const res = await exercise(scoped, route, send, 403, 'forbidden');
      expect(res.body.error.prefixes).toEqual(['mine/']);
    });
  });

  describe('while the event loop is saturated', () => {
    let t: TestApp;
    let load: { stop(): Promise<void> };
    beforeAll(async () => {
      t = await startApp({ STATELOG_MAX_EVENT_LOOP_DELAY_MS: '40', STATELOG_LOAD_SAMPLE_INTERVAL_MS: '50' });
      // Start-up itself (module loading, migrations) may read as load in the first samples.
      await askUntil(() => t.http.get('/v1/stats'), (res) => res.status === 200, 15_000);
      load = saturate(150);
      await askUntil(() => t.http.get('/v1/stats'), (res) => res.status === 503, 15_000);
    });
    afterAll(async () => {
      await load?.stop();
      await t.close();
    });

    // A few routes stand for all, to keep the load short (a saturated core slows the other
    // test files down): every route sheds load with the same 503 it answers at shutdown
    // (below). These are the two that do not, /readyz with a 503 of its own, and a stream.
    const routes = ['GET /healthz', 'GET /metrics', 'GET /readyz', 'POST /v1/records', STREAM];
    it.each(routes.map((route) => [route, anyRequest[route]!] as const))(
      '%s answers 503 unavailable with Retry-After (/healthz, /metrics: 200)',
      async (route, send) => {
        if (route === 'GET /healthz' || route === 'GET /metrics') {
          await exercise(t, route, send, 200);
          return;
        }
        const refused = await askUntil(() => send(t), (answer) => answer.status === 503, 15_000);
        expect(verify(route, refused, 503, 'unavailable').headers['retry-after']).toBe('1');
      },
    );
  });

  describe('with readers that stop reading', () => {
    // Values of the largest size (1 MiB as JSON), more of them than the socket buffers
    // between the server and a reader that stopped reading hold, and than a page of a
    // PostgreSQL snapshot (at least 8 keys): the server has to wait for the reader.
    const VALUE_BYTES = 1024 * 1024;
    const VALUES = 32;
    let t: TestApp;
    beforeAll(async () => {
      // Large bodies keep the event loop busy: no load shedding here.
      const env = {
        STATELOG_MAX_SNAPSHOTS: '1',
        // Every plain snapshot reads the store again: none is kept for later requests.
        STATELOG_SNAPSHOT_MAX_AGE_SECONDS: '0',
        STATELOG_TOMBSTONE_RETENTION_MS: '0',
        STATELOG_MAX_EVENT_LOOP_DELAY_MS: '0',
      };
      t = await startApp({ ...env, STATELOG_SYNC: 'normal' });
      const value = 'v'.repeat(VALUE_BYTES - 2);
      for (let i = 0; i < VALUES; i += 8) {
        const records = Array.from({ length: 8 }, (_, j) => ({ key: `big/${i + j}`, value }));
        expect((await batch(t, records)).status).toBe(200);
      }
    });
    afterAll(() => t.close());

    it('a read of the store taking the only slot: a snapshot, or a stream with snapshot=true, that needs another gets 429 with Retry-After', async () => {
      // STATELOG_MAX_SNAPSHOTS bounds reads of the store: while the whole state is being
      // read, a request that cannot share that read (another prefix, another shape) waits its turn.
      const big = (): Promise<unknown> => fetch(`${baseUrl(t.app)}/v1/snapshot`).then((res) => res.arrayBuffer());
      const others: [string, () => PromiseLike<Answer>][] = [
        ['GET /v1/snapshot', () => t.http.get('/v1/snapshot?prefix=none')],
        [STREAM, () => anyRequest[STREAM]!(t)],
      ];
      for (const [route, send] of others) {
        const refused = await askUntil(
          async () => {
            const reading = big();
            await new Promise((resolve) => setTimeout(resolve, 5));
            const answer = await send();
            await reading;
            return answer;
          },
          (answer) => answer.status === 429,
          15_000,
        );
        verify(route, refused, 429, 'too_many_requests');
        expect([refused.headers['retry-after'], refused.body.error.limit]).toEqual(['1', 1]);
      }
    });

    it('a stream fallen behind the horizon gets event: reset with the 410 body, then ends', async () => {
      const stalled = await stalledRead(t, '/v1/changes/stream?after=0');
      const written = await untilStalled(stalled.socket);
      expect(written).toBeLessThan(VALUES * VALUE_BYTES);
      // Behind the records the server has not read yet, a delete marker that compaction removes.
      const { body } = await batch(t, [{ key: 'gone', value: 1 }, { key: 'gone', op: 'delete' }]);
      expect((await t.http.post('/v1/admin/compact')).body.horizon).toBe(body.offset);
      const text = await stalled.readToEnd();
      const res = verify(STREAM, { status: 200, headers: stalled.response.headers as Answer['headers'], text, body: {} }, 200);
      const received = events(res);
      expect(received.slice(0, -1).every((e) => e.event === 'record' && Number(e.id) <= VALUES)).toBe(true);
      expect(received.length).toBeLessThan(VALUES + 1);
      expect(received.at(-1)!.event).toBe('reset');
      expect(JSON.parse(received.at(-1)!.data!)).toMatchObject({ error: { code: 'offset_compacted', horizon: body.offset } });
    });
  });

  describe('with every watcher slot taken', () => {
    let t: TestApp;
    beforeAll(async () => {
      t = await startApp({ STATELOG_MAX_WATCHERS: '1', STATELOG_SYNC: 'normal' });
    });
    afterAll(() => t.close());

    it('a long poll beyond STATELOG_MAX_WATCHERS gets 429 with Retry-After', async () => {
      const waiting = t.http.get('/v1/changes?wait=5').then((res) => res);
      // Asked between turns of the event loop, so that the poll gets there.
      const slotsInUse = () => new Promise<number>((resolve) => setTimeout(() => resolve(t.app.services.watchers.inUse), 10));
      await askUntil(slotsInUse, (inUse) => inUse === 1, 2000);
      const res = await exercise(t, 'GET /v1/changes', (c) => c.http.get('/v1/changes?wait=5'), 429, 'too_many_requests');
      expect([res.headers['retry-after'], res.body.error.limit]).toEqual(['1', 1]);
      await t.http.put('/v1/keys/wake').set('content-type', 'application/json').send('{"value":1}');
      expect((await waiting).status).toBe(200);
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

    // A compaction that cannot reach the database is a failed run: 503, never 500.
    const expected: Record<string, [number, string?]> = {
      'GET /healthz': [200],
      'GET /readyz': [503, 'unavailable'],
      'POST /v1/admin/compact': [503, 'unavailable'],
    };
    it.each(Object.entries(anyRequest))('%s answers 500 internal (/readyz, compact: 503, /healthz: 200)', async (route, send) => {
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
