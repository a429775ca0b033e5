// STATELOG_CORS_ORIGINS at the HTTP level: which answers carry which CORS headers
// (test/ui/cors.test.ts shows the same from a page in Chromium).
import { afterEach, describe, expect, it } from 'vitest';
import { join } from 'node:path';
import { json, startApp, tempDir, type TestApp } from './support/helpers.js';
import { runServerExpectingExit } from './support/child-server.js';

let t: TestApp | undefined;
afterEach(async () => {
  await t?.close();
  t = undefined;
});

const ALLOWED = 'https://dash.example.com';
const corsHeaders = (headers: Record<string, string>) =>
  Object.fromEntries(Object.entries(headers).filter(([name]) => name.startsWith('access-control-')));

describe('CORS', () => {
  it('sends no CORS header at all when STATELOG_CORS_ORIGINS is unset', async () => {
    t = await startApp();
    const get = await t.http.get('/v1/stats').set('origin', ALLOWED);
    expect(get.status).toBe(200);
    expect(corsHeaders(get.headers)).toEqual({});
    const preflight = await t.http.options('/v1/keys/a').set({ origin: ALLOWED, 'access-control-request-method': 'PUT' });
    expect(corsHeaders(preflight.headers)).toEqual({});
  });

  it('answers a listed origin, exposes the API’s headers, and answers preflights before auth', async () => {
    t = await startApp({ STATELOG_CORS_ORIGINS: `http://localhost:3000,${ALLOWED}`, STATELOG_TOKENS: 'write:w-token' });
    const preflight = await t.http.options('/v1/keys/a').set({
      origin: ALLOWED,
      'access-control-request-method': 'PUT',
      'access-control-request-headers': 'authorization,content-type,if-match,idempotency-key',
    });
    expect(preflight.status).toBe(204);
    expect(preflight.headers['access-control-allow-origin']).toBe(ALLOWED);
    expect(preflight.headers['access-control-allow-methods']).toContain('PUT');
    for (const header of ['authorization', 'content-type', 'if-match', 'idempotency-key', 'last-event-id']) {
      expect(preflight.headers['access-control-allow-headers']).toContain(header);
    }

    const put = await t.http.put('/v1/keys/a').set({ ...json, origin: ALLOWED, authorization: 'Bearer w-token' }).send({ value: 1 });
    expect(put.status).toBe(200);
    expect(put.headers['access-control-allow-origin']).toBe(ALLOWED);
    expect(put.headers.vary).toMatch(/origin/i);
    const exposed = put.headers['access-control-expose-headers']!.split(',').map((name: string) => name.trim());
    expect(exposed).toEqual(expect.arrayContaining(['etag', 'x-log-offset', 'x-log-epoch', 'retry-after', 'x-request-id']));

    // A refusal is readable by the page too.
    const refused = await t.http.get('/v1/keys/a').set('origin', ALLOWED);
    expect(refused.status).toBe(401);
    expect(refused.headers['access-control-allow-origin']).toBe(ALLOWED);

    const snapshot = await t.http.get('/v1/snapshot').set({ origin: ALLOWED, authorization: 'Bearer w-token' });
    expect(snapshot.headers['access-control-allow-origin']).toBe(ALLOWED);
    expect(snapshot.headers['x-log-offset']).toBe('1');
  });

  it('carries the headers on the change stream', async () => {
    t = await startApp({ STATELOG_CORS_ORIGINS: ALLOWED });
    const controller = new AbortController();
    const { port } = t.app.server.address() as { port: number };
    const res = await fetch(`http://127.0.0.1:${port}/v1/changes/stream?after=0`, { headers: { origin: ALLOWED }, signal: controller.signal });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    expect(res.headers.get('access-control-allow-origin')).toBe(ALLOWED);
    controller.abort();
  });

  it('gives an origin not listed no CORS header, so its page cannot read the answer', async () => {
    t = await startApp({ STATELOG_CORS_ORIGINS: ALLOWED });
    const get = await t.http.get('/v1/stats').set('origin', 'https://evil.example.com');
    expect(get.status).toBe(200);
    expect(get.headers['access-control-allow-origin']).toBeUndefined();
    const preflight = await t.http.options('/v1/keys/a').set({ origin: 'https://evil.example.com', 'access-control-request-method': 'PUT' });
    expect(preflight.headers['access-control-allow-origin']).toBeUndefined();
  });

  it('answers any origin with "*"', async () => {
    t = await startApp({ STATELOG_CORS_ORIGINS: '*' });
    const get = await t.http.get('/v1/stats').set('origin', 'https://anywhere.example');
    expect(get.headers['access-control-allow-origin']).toBe('*');
  });

  it('a wildcard origin stops the server at start with one line naming the variable, before anything is written', async () => {
    const db = join(tempDir(), 'cors.db');
    const { code, stderr } = await runServerExpectingExit({ STATELOG_DB: db, STATELOG_CORS_ORIGINS: 'https://*.example.com' });
    expect(code).toBe(1);
    expect(stderr.trim().split('\n')).toEqual([
      expect.stringMatching(/^statelog: invalid setting STATELOG_CORS_ORIGINS: entry 1 \("https:\/\/\*\.example\.com"\) is a pattern/),
    ]);
  });
});
