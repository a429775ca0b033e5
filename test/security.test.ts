// Security review findings, as tests: keys and prefixes stay inside the data they name,
// limits apply before large bodies are read, and answers show nothing of the insides.
import { connect } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { toApiError } from '../src/http/error-handler.js';
import { LIST_PAGE_CHARS } from '../src/routes/keys.js';
import { json, startApp, type TestApp } from './support/helpers.js';
import { portOf } from './support/http.js';

let t: TestApp | undefined;
afterEach(async () => {
  await t?.close();
  t = undefined;
});

const key = (k: string) => `/v1/keys/${encodeURIComponent(k)}`;

async function put(app: TestApp, k: string, value: unknown): Promise<void> {
  const res = await app.http.put(key(k)).set(json).send({ value });
  expect(res.status, k).toBe(200);
}

async function listAll(app: TestApp, prefix: string, limit = 1000): Promise<{ keys: string[]; pages: string[] }> {
  const keys: string[] = [];
  const pages: string[] = [];
  let cursor: string | null = null;
  do {
    const query: Record<string, string | number> = { prefix, limit, ...(cursor ? { cursor } : {}) };
    const res = await app.http.get('/v1/keys').query(query);
    expect(res.status).toBe(200);
    pages.push(res.text);
    keys.push(...(res.body.items as { key: string }[]).map((item) => item.key));
    cursor = res.body.cursor as string | null;
  } while (cursor !== null);
  return { keys, pages };
}

describe('keys and prefixes', () => {
  const keys = [
    'a', 'a/', 'a/b', "a'", 'a%', 'a_', 'ab', 'a\u00ff', 'a\uffff', 'a\u{10ffff}', 'b', 'x%y', 'x_y', 'xay', 'x\\y',
    "'; DROP TABLE log; --", '" OR 1=1 --', '*', '%', '_',
  ];

  it('are data, never SQL: each round-trips and the tables survive', async () => {
    t = await startApp();
    for (const k of keys) await put(t, k, { k });
    for (const k of keys) {
      const res = await t.http.get(key(k));
      expect(res.status, k).toBe(200);
      expect(res.body).toMatchObject({ key: k, value: { k } });
    }
    expect((await t.http.delete(key("'; DROP TABLE log; --"))).status).toBe(200);
    expect((await t.http.get('/v1/stats')).body).toMatchObject({ records: keys.length + 1, liveKeys: keys.length - 1 });
  });

  it.each([
    ['a', ['a', 'a/', 'a/b', "a'", 'a%', 'a_', 'ab', 'a\u00ff', 'a\uffff', 'a\u{10ffff}']],
    ['a/', ['a/', 'a/b']],
    ['x%', ['x%y']],
    ['x_', ['x_y']],
    ['%', ['%']],
    ['_', ['_']],
    ["'", ["'; DROP TABLE log; --"]],
    ['a\u{10ffff}', ['a\u{10ffff}']],
    ['a\uffff', ['a\uffff']],
  ])('prefix %j lists exactly the keys that start with it (no wildcards)', async (prefix, expected) => {
    t = await startApp();
    for (const k of keys) await put(t, k, 1);
    const listed = await listAll(t, prefix);
    expect(listed.keys).toEqual([...expected].sort((x, y) => Buffer.compare(Buffer.from(x), Buffer.from(y))));
  });

  it('a cursor from elsewhere never leads outside the prefix', async () => {
    t = await startApp();
    for (const k of ['a1', 'a2', 'b1', 'b2']) await put(t, k, 1);
    const forged = (k: string) => Buffer.from(k, 'utf8').toString('base64url');
    const before = await t.http.get('/v1/keys').query({ prefix: 'b', cursor: forged('a') });
    expect(before.body.items.map((item: { key: string }) => item.key)).toEqual(['b1', 'b2']);
    const after = await t.http.get('/v1/keys').query({ prefix: 'a', cursor: forged('a9') });
    expect(after.body).toMatchObject({ items: [], cursor: null });
  });
});

describe('listing large values', () => {
  it(`pages by size: no page holds much more than ${LIST_PAGE_CHARS} characters, and every key is listed once`, async () => {
    const valueBytes = 600_000;
    t = await startApp({ STATELOG_MAX_VALUE_BYTES: String(valueBytes + 100) });
    const names = Array.from({ length: 30 }, (_, i) => `big/${String(i).padStart(2, '0')}`);
    for (const k of names) await put(t, k, 'v'.repeat(valueBytes));
    await put(t, 'other', 1);

    const listed = await listAll(t, 'big/');
    expect(listed.keys).toEqual(names);
    expect(listed.pages.length).toBeGreaterThan(1);
    for (const page of listed.pages) expect(page.length).toBeLessThan(LIST_PAGE_CHARS + valueBytes + 1000);
  });

  it('sends at least one item per page, however large', async () => {
    t = await startApp({ STATELOG_MAX_VALUE_BYTES: String(LIST_PAGE_CHARS + 1000) });
    await put(t, 'huge/1', 'h'.repeat(LIST_PAGE_CHARS));
    await put(t, 'huge/2', 'h'.repeat(LIST_PAGE_CHARS));
    const listed = await listAll(t, 'huge/');
    expect(listed.keys).toEqual(['huge/1', 'huge/2']);
    expect(listed.pages).toHaveLength(2);
  });
});

/** Sends only the head of a request that announces a large body, and reads the answer. */
function announce(port: number, head: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => socket.write(head));
    let received = '';
    socket.setEncoding('utf8').on('data', (chunk: string) => {
      received += chunk;
      if (received.includes('\r\n\r\n')) {
        socket.destroy();
        resolve(received);
      }
    });
    socket.on('error', reject);
  });
}

describe('body limits', () => {
  it.each([
    ['PUT', '/v1/keys/a'],
    ['POST', '/v1/records'],
    ['DELETE', '/v1/keys/a'],
  ])('%s %s refuses an announced oversized body with 413 before reading it', async (method, path) => {
    t = await startApp({ STATELOG_MAX_VALUE_BYTES: '1000' });
    const answer = await announce(
      portOf(t.app.server),
      `${method} ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000000000\r\n\r\n`,
    );
    expect(answer).toMatch(/^HTTP\/1\.1 413 /);
  });

  it('refuses a value over STATELOG_MAX_VALUE_BYTES with 413 and writes nothing', async () => {
    t = await startApp({ STATELOG_MAX_VALUE_BYTES: '1000' });
    const res = await t.http.put('/v1/keys/a').set(json).send({ value: 'x'.repeat(1000) });
    expect(res.status).toBe(413);
    expect(res.body).toMatchObject({ error: { code: 'payload_too_large' } });
    expect((await t.http.get('/v1/stats')).body).toMatchObject({ head: 0 });
  });

  it('refuses deep nesting with 400, also where a prototype key hides inside', async () => {
    t = await startApp();
    const depth = 100_000;
    const bodies: [string, string][] = [
      ['/v1/keys/a', `{"value":${'['.repeat(depth)}"constructor"${']'.repeat(depth)}}`],
      ['/v1/keys/a', `{"value":${'{"a":'.repeat(depth)}{"__proto__":1}${'}'.repeat(depth)}}`],
      ['/v1/records', `{"records":[{"key":"k","value":${'['.repeat(depth)}1${']'.repeat(depth)}}]}`],
    ];
    for (const [path, body] of bodies) {
      const res = await (path === '/v1/records' ? t.http.post(path) : t.http.put(path)).set(json).send(body);
      expect(res.status, body.slice(0, 40)).toBe(400);
    }
    expect((await t.http.get('/v1/stats')).body).toMatchObject({ head: 0 });
  });

  it('refuses deep nesting with 400 where only the Idempotency-Key fingerprint reads the body', async () => {
    t = await startApp();
    await put(t, 'a', 1);
    const deep = `{"value":${'['.repeat(30_000)}${']'.repeat(30_000)}}`;
    const res = await t.http.delete('/v1/keys/a').set(json).set('idempotency-key', 'deep-1').send(deep);
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ error: { code: 'invalid_request' } });
    expect((await t.http.get('/v1/keys/a')).status).toBe(200);
  });
});

describe('error answers', () => {
  const secret = 'SELECT value FROM log WHERE key = ? at /srv/data/statelog.db';

  it.each([
    ['an error from a library with a client status', Object.assign(new Error(secret), { statusCode: 400 })],
    ['an error with an odd client status', Object.assign(new Error(secret), { statusCode: 418 })],
    ['a database error', Object.assign(new Error(secret), { code: 'SQLITE_CORRUPT' })],
    ['a TypeError', new TypeError(secret)],
    ['a stack overflow', new RangeError('Maximum call stack size exceeded')],
  ])('never pass on the message of %s', (_what, err) => {
    const answer = toApiError(err);
    expect(JSON.stringify(answer.toBody())).not.toMatch(/SELECT|statelog\.db|stack/);
    expect(answer.statusCode === 500 || (answer.statusCode >= 400 && answer.statusCode < 500)).toBe(true);
  });

  it('keep a client error a client error, never a 5xx', () => {
    expect(toApiError(Object.assign(new Error('x'), { statusCode: 418 })).statusCode).toBe(400);
    expect(toApiError(Object.assign(new Error('x'), { statusCode: 404 })).code).toBe('not_found');
  });
});

describe('malformed paths', () => {
  it.each([
    ['/v1/keys/%ZZ', 'invalid_key', 'percent-encoded'],
    ['/v1/keys/%C3%28', 'invalid_key', 'percent-encoded'],
    [`/v1/keys/${'%C3%A9'.repeat(400)}`, 'invalid_key', '512 bytes'],
  ])('%s → 400 %s', async (path, code, says) => {
    t = await startApp();
    const res = await t.http.get(path);
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ error: { code } });
    expect(res.body.error.message).toContain(says);
  });
});
