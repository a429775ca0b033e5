// HTTP details at the edges of the contract: conditional reads, request ids, shutdown,
// and bodies that must be refused rather than stored or failed on.
import { connect } from 'node:net';
import { beforeEach, describe, expect, it } from 'vitest';
import { json, startApp, type TestApp } from './support/helpers.js';

let t: TestApp;
beforeEach(async () => {
  t = await startApp();
  return () => t.close();
});

describe('GET /v1/keys/{key} with If-None-Match', () => {
  it('answers 304 with the ETag and no body or Content-Length', async () => {
    await t.http.put('/v1/keys/a').set(json).send({ value: 'some text' });
    const res = await t.http.get('/v1/keys/a').set('if-none-match', '"1"');
    expect(res.status).toBe(304);
    expect(res.headers.etag).toBe('"1"');
    expect(res.headers['content-length']).toBeUndefined();
    expect(res.headers['content-type']).toBeUndefined();
    expect(res.text).toBe('');
  });
});

describe('X-Request-Id', () => {
  it.each([
    ['an ordinary answer', '/healthz', 200],
    ['an unknown route', '/v1/nope', 404],
    ['malformed percent-encoding in a key', '/v1/keys/%ZZ', 400],
  ])('is echoed on %s', async (_what, path, status) => {
    const res = await t.http.get(path).set('x-request-id', 'trace-42');
    expect(res.status).toBe(status);
    expect(res.headers['x-request-id']).toBe('trace-42');
  });

  it('is generated when the given one is not 1 to 128 visible ASCII characters', async () => {
    const res = await t.http.get('/healthz').set('x-request-id', 'has space');
    expect(res.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
  });
});

describe('while shutting down', () => {
  beforeEach(() => {
    // What the preClose hook does when SIGTERM arrives.
    t.app.services.lifecycle.closing = true;
  });

  it('GET /healthz still answers 200: the process runs', async () => {
    const res = await t.http.get('/healthz');
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ status: 'ok' });
  });

  it.each([
    ['GET /readyz', () => t.http.get('/readyz')],
    ['GET /v1/keys/a', () => t.http.get('/v1/keys/a')],
    ['PUT /v1/keys/a', () => t.http.put('/v1/keys/a').set(json).send({ value: 1 })],
  ])('%s answers 503 unavailable with Retry-After and Connection: close', async (_route, send) => {
    const res = await send();
    expect(res.status).toBe(503);
    expect(res.body.error.code).toBe('unavailable');
    expect(res.headers).toMatchObject({ 'retry-after': '1', connection: 'close' });
  });
});

describe('numbers beyond the range of a double', () => {
  it('are refused in a PUT value instead of being stored as null', async () => {
    const res = await t.http.put('/v1/keys/n').set(json).send('{"value":{"big":[1, -1e400]}}');
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
    expect((await t.http.get('/v1/keys/n')).status).toBe(404);
  });

  it('are refused in a batch item, with its index, and nothing is written', async () => {
    const res = await t.http.post('/v1/records').set(json).send('{"records":[{"key":"a","value":1},{"key":"b","value":1e999}]}');
    expect(res.status).toBe(400);
    expect(res.body.error).toMatchObject({ code: 'invalid_request', index: 1 });
    expect((await t.http.get('/v1/stats')).body.head).toBe(0);
  });

  it('leave values with null and large finite numbers alone', async () => {
    const value = { a: null, b: [null, 1.7976931348623157e308, -5e-324] };
    expect((await t.http.put('/v1/keys/ok').set(json).send({ value })).status).toBe(200);
    expect((await t.http.get('/v1/keys/ok')).body.value).toEqual(value);
  });
});

describe('a DELETE body nested too deeply to fingerprint', () => {
  it('is a 400, not a 500, and deletes nothing', async () => {
    await t.http.put('/v1/keys/d').set(json).send({ value: 1 });
    const deep = `{"x":${'['.repeat(200_000)}${']'.repeat(200_000)}}`;
    const res = await t.http.delete('/v1/keys/d').set({ ...json, 'idempotency-key': 'deep' }).send(deep);
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
    expect((await t.http.get('/v1/keys/d')).status).toBe(200);
  });
});

describe('GET /v1/stats', () => {
  it('counts as tombstones the keys whose latest record is a delete marker', async () => {
    const stats = async () => (await t.http.get('/v1/stats')).body;
    await t.http.post('/v1/records').set(json).send({ records: [{ key: 'a', value: 1 }, { key: 'b', value: 1 }, { key: 'a', op: 'delete' }] });
    expect(await stats()).toMatchObject({ head: 3, records: 3, liveKeys: 1, tombstones: 1, dirtyRatio: 1 / 3 });
    // Set again, the key is live: its delete marker is superseded, dirty, not a tombstone.
    await t.http.put('/v1/keys/a').set(json).send({ value: 2 });
    expect(await stats()).toMatchObject({ head: 4, records: 4, liveKeys: 2, tombstones: 0, dirtyRatio: 2 / 4 });
  });
});

describe('malformed HTTP', () => {
  it('answers broken framing and oversized headers with the contract body', async () => {
    const { port } = t.app.server.address() as { port: number };
    const raw = (request: string) =>
      new Promise<string>((resolve) => {
        const socket = connect(port, '127.0.0.1', () => socket.write(request));
        let answer = '';
        socket.on('data', (chunk) => (answer += chunk));
        socket.on('close', () => resolve(answer));
      });
    for (const [request, status] of [
      ['GET /v1/keys HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n', 400],
      [`GET /v1/keys HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`, 431],
      ['NOT-HTTP\r\n\r\n', 400],
    ] as const) {
      const answer = await raw(request);
      expect(answer.startsWith(`HTTP/1.1 ${status} `)).toBe(true);
      const body = JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4));
      expect(body.error.code).toBe('invalid_request');
    }
  });
});

describe('a client that half-closes once its request is sent', () => {
  /** Sends the request, then shuts down the sending side (FIN), and reads the answer. */
  const halfClosed = (request: string) =>
    new Promise<string>((resolve) => {
      const { port } = t.app.server.address() as { port: number };
      const socket = connect({ port, host: '127.0.0.1', allowHalfOpen: true }, () => socket.end(request));
      let answer = '';
      socket.on('data', (chunk) => (answer += chunk));
      socket.on('close', () => resolve(answer));
    });

  // A long poll or stream takes the FIN as the client leaving (src/http/request-lifetime.ts):
  // it is answered at once with what there is.
  it('still gets the answer to a write (after its fsync) and to a long poll', async () => {
    const body = '{"value":1}';
    const put = await halfClosed(
      `PUT /v1/keys/half HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`,
    );
    expect(put).toMatch(/^HTTP\/1\.1 200 /);
    expect((await t.http.get('/v1/keys/half')).body.value).toBe(1);
    const { head } = (await t.http.get('/v1/stats')).body as { head: number };
    const poll = await halfClosed(`GET /v1/changes?after=${head}&wait=1 HTTP/1.1\r\nHost: x\r\n\r\n`);
    expect(poll).toMatch(/^HTTP\/1\.1 200 /);
    expect(JSON.parse(poll.slice(poll.indexOf('\r\n\r\n') + 4))).toMatchObject({ records: [], next: head });
  });
});

describe('shutdown', () => {
  it('does not wait for a connection that was opened and sent nothing', async () => {
    const { port } = t.app.server.address() as { port: number };
    const silent = connect(port, '127.0.0.1');
    await new Promise((resolve) => silent.once('connect', resolve));
    const closed = new Promise((resolve) => silent.once('close', resolve));
    const started = Date.now();
    await t.app.close();
    await closed;
    expect(Date.now() - started).toBeLessThan(2_000);
  });
});
