// Every route the app registers has a scope rule (src/http/scope.ts): the list comes
// from fastify's onRoute as the app is built, so a route added without one fails here.
import type { RouteOptions } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp, type App } from '../src/app.js';
import { loadConfig } from '../src/config.js';
import { OPEN_ROUTES } from '../src/http/auth.js';
import { SCOPE_RULES } from '../src/http/scope.js';
import { tempDir, testStore, type TestStore } from './support/helpers.js';

describe('scope rules', () => {
  const routes: { method: string; url: string; scope: unknown }[] = [];
  let app: App;
  let database: TestStore;
  beforeAll(async () => {
    database = await testStore(tempDir());
    const config = loadConfig({ ...database.env, LOG_LEVEL: 'silent', STATELOG_COMPACT_INTERVAL_MS: '0' });
    app = await buildApp(config, {
      onRoute: (route: RouteOptions) => {
        for (const method of [route.method].flat()) routes.push({ method, url: route.url, scope: route.config?.scope });
      },
    });
    await app.ready();
  });
  afterAll(async () => {
    await app?.close();
    await database?.drop();
  });

  it('lists the routes of the API', () => {
    // The list is the app's: it holds the routes every tenant check depends on.
    for (const [method, url] of [['PUT', '/v1/keys/:key'], ['POST', '/v1/records'], ['GET', '/v1/changes/stream'], ['GET', '/metrics'], ['HEAD', '/v1/keys/:key']]) {
      expect(routes).toContainEqual(expect.objectContaining({ method, url }));
    }
  });

  it('gives every route a scope rule', () => {
    const without = routes.filter((route) => !SCOPE_RULES.includes(route.scope as never)).map((route) => `${route.method} ${route.url}`);
    expect(without).toEqual([]);
  });

  it('marks open exactly the routes that need no token', () => {
    const open = new Set(routes.filter((route) => route.scope === 'open').map((route) => route.url));
    expect([...open].sort()).toEqual([...OPEN_ROUTES].sort());
  });

  it('keeps /v1/admin, stats and metrics to tokens without prefixes', () => {
    for (const route of routes.filter((r) => r.url.startsWith('/v1/admin') || r.url === '/v1/stats' || r.url === '/metrics')) {
      expect(route.scope, `${route.method} ${route.url}`).toBe('unscoped');
    }
  });
});
