// The request pipeline's cost and reach: every request passes its checks in as few
// hooks as their order allows (each hook is a pass through fastify's hook runner on the
// hottest path), and every answer still carries the request id, whichever check or
// hook answered it.
import { describe, expect, it } from 'vitest';
import { Histogram, Registry } from 'prom-client';
import { Metrics } from '../src/metrics.js';
import { json, startApp, type TestApp } from './support/helpers.js';

const ORIGIN = 'https://app.example';

/** The hooks of PUT /v1/keys/:key by kind, as fastify lists them for the route. */
function putHooks(t: TestApp): Record<string, string[]> {
  const lines = t.app.printRoutes({ includeHooks: true, commonPrefix: false }).split('\n');
  const route = lines.findIndex((line) => /\/:key \((?:[A-Z]+, )*PUT\b/.test(line));
  expect(route).toBeGreaterThanOrEqual(0);
  const hooks: Record<string, string[]> = {};
  for (const line of lines.slice(route + 1)) {
    const hook = /• \((\w+)\) (\[.*\])/.exec(line);
    if (!hook) break;
    hooks[hook[1]!] = JSON.parse(hook[2]!) as string[];
  }
  return hooks;
}

async function withApp(env: Record<string, string>, test: (t: TestApp) => Promise<void>): Promise<void> {
  const t = await startApp(env);
  try {
    await test(t);
  } finally {
    await t.close();
  }
}

describe('the hooks a PUT passes', () => {
  it('one onRequest hook with overload shedding and auth, and none on the response', async () => {
    await withApp({ STATELOG_TOKENS: 'write:secret-w', STATELOG_MAX_EVENT_LOOP_DELAY_MS: '1000' }, async (t) => {
      const hooks = putHooks(t);
      expect(hooks.onRequest).toHaveLength(1);
      expect(hooks.onResponse).toBeUndefined();
      expect(hooks.onSend).toHaveLength(1);
      const res = await t.http.put('/v1/keys/a').set(json).set('authorization', 'Bearer secret-w').send({ value: 1 });
      expect(res.status).toBe(200);
      const refused = await t.http.put('/v1/keys/a').set(json).send({ value: 1 });
      expect(refused.status).toBe(401);
    });
  });

  it('two onRequest hooks of its own with CORS, whose hook runs between them', async () => {
    await withApp({ STATELOG_TOKENS: 'write:secret-w', STATELOG_CORS_ORIGINS: ORIGIN }, async (t) => {
      const hooks = putHooks(t);
      // The id and shutdown check, the CORS plugin's hook, then overload and auth.
      expect(hooks.onRequest).toHaveLength(3);
      expect(hooks.onResponse).toBeUndefined();
    });
  });
});

describe('X-Request-Id on answers given by the checks', () => {
  it('is on a 401 refusal, a CORS preflight and a 404', async () => {
    await withApp({ STATELOG_TOKENS: 'write:secret-w', STATELOG_CORS_ORIGINS: ORIGIN }, async (t) => {
      const refused = await t.http.put('/v1/keys/a').set(json).set('x-request-id', 'r-401').send({ value: 1 });
      expect([refused.status, refused.headers['x-request-id']]).toEqual([401, 'r-401']);
      const preflight = await t.http
        .options('/v1/keys/a')
        .set({ origin: ORIGIN, 'access-control-request-method': 'PUT', 'x-request-id': 'r-preflight' });
      expect([preflight.status, preflight.headers['x-request-id']]).toEqual([204, 'r-preflight']);
      const missing = await t.http.get('/v1/nope').set('authorization', 'Bearer secret-w').set('x-request-id', 'r-404');
      expect([missing.status, missing.headers['x-request-id']]).toEqual([404, 'r-404']);
    });
  });
});

describe('statelog_http_request_duration_seconds', () => {
  it('renders exactly as a prom-client Histogram of the same observations', async () => {
    const metrics = new Metrics({} as never);
    const registry = new Registry();
    const reference = new Histogram({
      name: 'statelog_http_request_duration_seconds',
      help: 'reference',
      labelNames: ['method', 'route', 'status'] as const,
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers: [registry],
    });
    const streamed = {};
    metrics.openStream('sse', streamed)();
    // Bounds themselves, values between and beyond them, several series, and a streamed
    // request that is counted but not timed.
    const observed: [string, string | undefined, number, number][] = [
      ['PUT', '/v1/keys/:key', 200, 1],
      ['PUT', '/v1/keys/:key', 200, 0.4],
      ['PUT', '/v1/keys/:key', 200, 2.5],
      ['PUT', '/v1/keys/:key', 412, 60_000],
      ['PUT', '/v1/keys/:key', 412, 75_000],
      ['GET', undefined, 404, 0],
      ['GET', '/v1/keys/:key', 200, 333.3],
    ];
    for (const [method, route, status, ms] of observed) {
      metrics.observeRequest(method, route, status, ms);
      reference.observe({ method, route: route ?? 'unmatched', status: String(status) }, ms / 1000);
    }
    metrics.observeRequest('GET', '/v1/changes/stream', 200, 5, streamed);
    const samples = (text: string) => text.split('\n').filter((line) => line.startsWith('statelog_http_request_duration_seconds'));
    const ours = samples(await metrics.registry.metrics());
    expect(ours.length).toBeGreaterThan(0);
    expect(ours).toEqual(samples(await registry.metrics()));
  });
});
