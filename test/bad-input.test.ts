// Every kind of bad input gets a clear 4xx with the contract's error body, and writes nothing.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, startApp, type TestApp } from './support/helpers.js';

let t: TestApp;
beforeAll(async () => {
  t = await startApp({ STATELOG_MAX_VALUE_BYTES: '1000' });
  await t.http.put('/v1/keys/existing').set(json).send({ value: 'kept' });
});
afterAll(async () => {
  await t.close();
});

interface Case {
  name: string;
  method: 'get' | 'put' | 'post' | 'delete';
  path: string;
  headers?: Record<string, string>;
  body?: string | Buffer;
  status: number;
  code: string;
}

const deep = (depth: number) => `{"value":${'['.repeat(depth)}${']'.repeat(depth)}}`;

const cases: Case[] = [
  { name: 'malformed JSON', method: 'put', path: '/v1/keys/k', headers: json, body: '{"value":', status: 400, code: 'invalid_json' },
  { name: 'empty JSON body', method: 'put', path: '/v1/keys/k', headers: json, body: '', status: 400, code: 'invalid_json' },
  { name: 'broken UTF-8', method: 'put', path: '/v1/keys/k', headers: json, body: Buffer.concat([Buffer.from('{"value":"'), Buffer.from([0xff, 0xfe]), Buffer.from('"}')]), status: 400, code: 'invalid_json' },
  { name: '__proto__ member', method: 'put', path: '/v1/keys/k', headers: json, body: '{"value":{"__proto__":{"x":1}}}', status: 400, code: 'invalid_json' },
  { name: 'body not an object', method: 'put', path: '/v1/keys/k', headers: json, body: '[1]', status: 400, code: 'invalid_request' },
  { name: 'missing value', method: 'put', path: '/v1/keys/k', headers: json, body: '{}', status: 400, code: 'invalid_request' },
  { name: 'extra member', method: 'put', path: '/v1/keys/k', headers: json, body: '{"value":1,"ttl":5}', status: 400, code: 'invalid_request' },
  { name: 'value over the limit', method: 'put', path: '/v1/keys/k', headers: json, body: JSON.stringify({ value: 'x'.repeat(1000) }), status: 413, code: 'payload_too_large' },
  { name: 'body far over the limit', method: 'put', path: '/v1/keys/k', headers: json, body: JSON.stringify({ value: 'x'.repeat(200_000) }), status: 413, code: 'payload_too_large' },
  { name: 'nesting too deep to store', method: 'put', path: '/v1/keys/k', headers: json, body: deep(30_000), status: 400, code: 'invalid_request' },
  { name: 'text/plain body', method: 'put', path: '/v1/keys/k', headers: { 'content-type': 'text/plain' }, body: '{"value":1}', status: 415, code: 'unsupported_media_type' },
  { name: 'form body', method: 'post', path: '/v1/records', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'a=1', status: 415, code: 'unsupported_media_type' },
  { name: 'empty key', method: 'put', path: '/v1/keys/', headers: json, body: '{"value":1}', status: 400, code: 'invalid_key' },
  { name: 'key of 513 bytes', method: 'put', path: `/v1/keys/${'k'.repeat(513)}`, headers: json, body: '{"value":1}', status: 400, code: 'invalid_key' },
  { name: 'key of 257 two-byte characters', method: 'get', path: `/v1/keys/${encodeURIComponent('é'.repeat(257))}`, status: 400, code: 'invalid_key' },
  { name: 'key with NUL', method: 'put', path: '/v1/keys/a%00b', headers: json, body: '{"value":1}', status: 400, code: 'invalid_key' },
  { name: 'key with newline', method: 'get', path: '/v1/keys/a%0Ab', status: 400, code: 'invalid_key' },
  { name: 'key with DEL', method: 'delete', path: '/v1/keys/a%7Fb', status: 400, code: 'invalid_key' },
  { name: 'key encoding a lone surrogate', method: 'put', path: '/v1/keys/%ED%A0%80', headers: json, body: '{"value":1}', status: 400, code: 'invalid_key' },
  { name: 'truncated percent-encoding', method: 'get', path: '/v1/keys/%E0%A4%A', status: 400, code: 'invalid_key' },
  { name: 'key with a raw slash', method: 'get', path: '/v1/keys/a/b', status: 400, code: 'invalid_key' },
  { name: 'key far too long for the router', method: 'get', path: `/v1/keys/${'%C3%A9'.repeat(1000)}`, status: 400, code: 'invalid_key' },
  { name: 'limit not a number', method: 'get', path: '/v1/keys?limit=ten', status: 400, code: 'invalid_request' },
  { name: 'limit over 1000', method: 'get', path: '/v1/keys?limit=5000', status: 400, code: 'invalid_request' },
  { name: 'negative limit', method: 'get', path: '/v1/keys?limit=-1', status: 400, code: 'invalid_request' },
  { name: 'limit given twice', method: 'get', path: '/v1/keys?limit=1&limit=2', status: 400, code: 'invalid_request' },
  { name: 'unknown query parameter', method: 'get', path: '/v1/keys?limt=5', status: 400, code: 'invalid_request' },
  { name: 'prefix with a control character', method: 'get', path: '/v1/keys?prefix=%01', status: 400, code: 'invalid_request' },
  { name: 'records missing', method: 'post', path: '/v1/records', headers: json, body: '{}', status: 400, code: 'invalid_request' },
  { name: 'records not an array', method: 'post', path: '/v1/records', headers: json, body: '{"records":{}}', status: 400, code: 'invalid_request' },
  { name: 'item with an unknown op', method: 'post', path: '/v1/records', headers: json, body: '{"records":[{"key":"a","op":"append","value":1}]}', status: 400, code: 'invalid_request' },
  { name: 'item with a string by', method: 'post', path: '/v1/records', headers: json, body: '{"records":[{"key":"a","op":"incr","by":"1"}]}', status: 400, code: 'invalid_request' },
  { name: 'item with a negative ifOffset', method: 'post', path: '/v1/records', headers: json, body: '{"records":[{"key":"a","value":1,"ifOffset":-1}]}', status: 400, code: 'invalid_request' },
  { name: 'item with a numeric key', method: 'post', path: '/v1/records', headers: json, body: '{"records":[{"key":1,"value":1}]}', status: 400, code: 'invalid_request' },
  { name: 'item value over the limit', method: 'post', path: '/v1/records', headers: json, body: JSON.stringify({ records: [{ key: 'a', value: 'x'.repeat(1000) }] }), status: 413, code: 'payload_too_large' },
  { name: 'unknown route', method: 'get', path: '/v2/keys/a', status: 404, code: 'not_found' },
  { name: 'wrong method', method: 'post', path: '/v1/keys/a', headers: json, body: '{"value":1}', status: 404, code: 'not_found' },
];

describe('bad input', () => {
  it.each(cases)('$name → $status $code', async (c) => {
    let request = t.http[c.method](c.path).set(c.headers ?? {});
    // Bodies go out byte for byte, never re-serialised by supertest.
    if (c.body !== undefined) request = request.serialize((body: unknown) => body as string).send(c.body as string);
    const answer = await request;
    expect(answer.status).toBe(c.status);
    expect(answer.body).toEqual({ error: expect.objectContaining({ code: c.code, message: expect.any(String) }) });
    expect(JSON.stringify(answer.body)).not.toMatch(/\bat .*\.(js|ts):\d+|SQLITE|node_modules/);
  });

  it('wrote nothing and kept what was there', async () => {
    const stats = await t.http.get('/v1/stats');
    expect(stats.body).toMatchObject({ head: 1, records: 1, liveKeys: 1 });
    expect((await t.http.get('/v1/keys/existing')).body.value).toBe('kept');
  });
});
