// /healthz and /readyz: liveness holds while the process runs; readiness fails while
// shutting down and when the database cannot be used. Errors from the database reach
// the client only as the contract's opaque 500.
import { afterEach, describe, expect, it } from 'vitest';
import { json, startApp, TEST_STORE, type TestApp } from './support/helpers.js';
import { portOf, send, type Received } from './support/http.js';

let t: TestApp | undefined;
afterEach(async () => {
  await t?.close();
  t = undefined;
});

/** An answer that shows nothing of the server's insides. */
function expectOpaque(res: { text: string }, app: TestApp): void {
  const where = Object.values(app.database.env);
  const words = ['sqlite', 'SQLITE', 'postgres', 'relation', 'state_gone', 'refused', 'SELECT', 'INSERT', 'database connection'];
  for (const leak of [...where, ...words, '    at ', '.ts:', '.js:']) expect(res.text).not.toContain(leak);
}

describe('GET /healthz and /readyz', () => {
  it('are 200 on a running server', async () => {
    t = await startApp();
    const health = await t.http.get('/healthz');
    expect(health.status).toBe(200);
    expect(health.body).toEqual({ status: 'ok' });
    const ready = await t.http.get('/readyz');
    expect(ready.status).toBe(200);
    expect(ready.body).toEqual({ status: 'ready' });
  });

  it('readiness fails with 503 once shutdown begins, liveness does not', async () => {
    const during: Record<string, Received> = {};
    t = await startApp({}, {
      prepare: (app) => {
        // Runs after the app's own preClose hook, while the server still accepts.
        app.addHook('preClose', async () => {
          const port = portOf(app.server);
          during.ready = await send(port, { method: 'GET', path: '/readyz' });
          during.health = await send(port, { method: 'GET', path: '/healthz' });
          during.write = await send(port, {
            method: 'PUT',
            path: '/v1/keys/late',
            headers: json,
            body: '{"value":1}',
          });
        });
      },
    });
    await t.app.close();
    expect((await t.database.counted()).records).toBe(0);

    expect(during.ready!.status).toBe(503);
    expect(during.ready!.json).toMatchObject({ error: { code: 'unavailable' } });
    expect(during.ready!.headers['retry-after']).toBe('1');
    expect(during.health!.status).toBe(200);
    expect(during.health!.json).toEqual({ status: 'ok' });
    // Everything else is refused as well, and the refused write left nothing.
    expect(during.write!.status).toBe(503);
    expectOpaque(during.write!, t);
  });

  it('readiness fails with 503 when the database is not usable, without saying why in detail', async () => {
    t = await startApp();
    expect((await t.http.get('/readyz')).status).toBe(200);
    await t.database.cutOff();
    const ready = await t.http.get('/readyz');
    expect(ready.status).toBe(503);
    expect(ready.body).toMatchObject({ error: { code: 'unavailable' } });
    expectOpaque(ready, t);
    expect((await t.http.get('/healthz')).status).toBe(200);
  });
});

describe('database errors', () => {
  it('become an opaque 500 internal, with nothing written', async () => {
    t = await startApp();
    expect((await t.http.put('/v1/keys/a').set(json).send({ value: 1 })).status).toBe(200);
    // A real error of the database on the write path: appends to the log are refused.
    const restore = await t.database.failWrites();
    const put = await t.http.put('/v1/keys/b').set(json).send({ value: 2 });
    expect(put.status).toBe(500);
    expect(put.body).toEqual({ error: { code: 'internal', message: 'internal error' } });
    expectOpaque(put, t);
    await restore();
    const stats = await t.http.get('/v1/stats');
    expect(stats.body).toMatchObject({ head: 1, records: 1 });
    expect((await t.http.get('/v1/keys/b')).status).toBe(404);
    expect((await t.http.put('/v1/keys/b').set(json).send({ value: 2 })).body).toEqual({ key: 'b', offset: 2 });
  });

  it('on reads become an opaque 500 internal too', async () => {
    t = await startApp();
    // A real error of the database on the read path: the table of the current state is gone.
    const restore = await t.database.failReads();
    for (const path of ['/v1/keys/a', '/v1/keys?prefix=a']) {
      const res = await t.http.get(path);
      expect(res.status, path).toBe(500);
      expect(res.body).toEqual({ error: { code: 'internal', message: 'internal error' } });
      expectOpaque(res, t);
    }
    await restore();
    expect((await t.http.get('/v1/keys/a')).status).toBe(404);
  });

  // A closed SQLite connection throws its own error (not an SqliteError). On PostgreSQL a
  // database that cannot be reached is an outage, answered 503 (the cluster's behaviour).
  it.runIf(TEST_STORE === 'sqlite')('on reads from a closed SQLite connection become an opaque 500 internal', async () => {
    t = await startApp();
    await t.database.cutOff();
    for (const path of ['/v1/keys/a', '/v1/keys?prefix=a', '/metrics']) {
      const res = await t.http.get(path);
      expect(res.status, path).toBe(500);
      expect(res.body).toEqual({ error: { code: 'internal', message: 'internal error' } });
      expectOpaque(res, t);
    }
  });
});
