// /healthz and /readyz: liveness holds while the process runs; readiness fails while
// shutting down and when the database cannot be used. Errors from the database reach
// the client only as the contract's opaque 500.
import { rmSync } from 'node:fs';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { SqliteStore } from '../src/store/sqlite-store.js';
import { json, startApp, type TestApp } from './helpers.js';
import { portOf, send, type Received } from './support/http.js';

let t: TestApp | undefined;
afterEach(async () => {
  await t?.close();
  t = undefined;
});

function database(app: TestApp): Database.Database {
  const store = app.app.services.store;
  if (!(store instanceof SqliteStore)) throw new Error('these tests need the SQLite store');
  return store.db;
}

/** An answer that shows nothing of the server's insides. */
function expectOpaque(res: { text: string }, dbPath: string): void {
  for (const leak of [dbPath, 'sqlite', 'SQLITE', 'SELECT', 'INSERT', 'database connection', '    at ', '.ts:', '.js:']) {
    expect(res.text).not.toContain(leak);
  }
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
    t = await startApp({}, undefined, (app) => {
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
    });
    const { dbPath, dir } = t;
    await t.app.close();
    t = undefined;
    const db = new Database(dbPath, { readonly: true });
    const records = db.prepare('SELECT count(*) FROM log').pluck().get();
    db.close();
    rmSync(dir, { recursive: true, force: true });
    expect(records).toBe(0);

    expect(during.ready!.status).toBe(503);
    expect(during.ready!.json).toMatchObject({ error: { code: 'unavailable' } });
    expect(during.ready!.headers['retry-after']).toBe('1');
    expect(during.health!.status).toBe(200);
    expect(during.health!.json).toEqual({ status: 'ok' });
    // Everything else is refused as well, and the refused write left nothing.
    expect(during.write!.status).toBe(503);
    expectOpaque(during.write!, dbPath);
  });

  it('readiness fails with 503 when the database is not usable, without saying why in detail', async () => {
    t = await startApp();
    expect((await t.http.get('/readyz')).status).toBe(200);
    database(t).close();
    const ready = await t.http.get('/readyz');
    expect(ready.status).toBe(503);
    expect(ready.body).toMatchObject({ error: { code: 'unavailable' } });
    expectOpaque(ready, t.dbPath);
    expect((await t.http.get('/healthz')).status).toBe(200);
  });
});

describe('database errors', () => {
  it('become an opaque 500 internal, with nothing written', async () => {
    t = await startApp();
    expect((await t.http.put('/v1/keys/a').set(json).send({ value: 1 })).status).toBe(200);
    // A real SqliteError on the write path: the connection refuses writes.
    database(t).pragma('query_only = ON');
    const put = await t.http.put('/v1/keys/b').set(json).send({ value: 2 });
    expect(put.status).toBe(500);
    expect(put.body).toEqual({ error: { code: 'internal', message: 'internal error' } });
    expectOpaque(put, t.dbPath);
    database(t).pragma('query_only = OFF');
    const stats = await t.http.get('/v1/stats');
    expect(stats.body).toMatchObject({ head: 1, records: 1 });
    expect((await t.http.get('/v1/keys/b')).status).toBe(404);
  });

  it('on reads become an opaque 500 internal too', async () => {
    t = await startApp();
    database(t).close();
    for (const path of ['/v1/keys/a', '/v1/keys?prefix=a', '/metrics']) {
      const res = await t.http.get(path);
      expect(res.status, path).toBe(500);
      expect(res.body).toEqual({ error: { code: 'internal', message: 'internal error' } });
      expectOpaque(res, t.dbPath);
    }
  });
});
