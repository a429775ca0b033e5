// STATELOG_CORS_ORIGINS from a real browser: a page served on one port (its own origin)
// calls statelog on another port with fetch (a preflighted PUT, a GET whose ETag and
// X-Request-Id it reads) and follows the change stream with EventSource. The same page
// served from an origin not in the list is refused by Chromium.
import { createServer, type Server } from 'node:http';
import type { Browser, Page } from 'playwright-core';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { startApp } from '../support/helpers.js';
import { portOf } from '../support/http.js';
import { describeInBrowser, launchChromium, newVisit, SKIP_BROWSER_TESTS, type Visit } from './browser.js';

let browser: Browser;
const cleanups: (() => Promise<unknown>)[] = [];

beforeAll(async () => {
  if (SKIP_BROWSER_TESTS) return;
  browser = await launchChromium();
});
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});
afterAll(async () => {
  await browser?.close();
});

/** A page server on its own port: an empty HTML page, so the page's origin is http://127.0.0.1:<port>. */
async function pageServer(): Promise<{ server: Server; origin: string }> {
  const server = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    res.end('<!doctype html><title>elsewhere</title><p>a page on another origin</p>');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(() => new Promise((resolve) => server.close(resolve)));
  return { server, origin: `http://127.0.0.1:${portOf(server)}` };
}

/** Statelog on its own port, remembering the method, path and status of every answer. */
async function statelog(env: Record<string, string>) {
  const answered: { method: string; url: string; status: number }[] = [];
  const t = await startApp(env, {
    prepare: (app) => {
      app.addHook('onResponse', (req, reply, done) => {
        answered.push({ method: req.method, url: req.url, status: reply.statusCode });
        done();
      });
    },
  });
  cleanups.push(() => t.close());
  return { t, url: `http://127.0.0.1:${portOf(t.app.server)}`, answered };
}

async function openPage(origin: string): Promise<Visit> {
  const visit = await newVisit(browser, origin);
  cleanups.push(() => visit.context.close());
  await visit.page.goto('/');
  return visit;
}

/** Runs in the page: a PUT (preflighted: JSON and If-None-Match), a GET, and the headers it can read. */
function writeAndRead(page: Page, api: string) {
  return page.evaluate(async (base) => {
    try {
      const put = await fetch(`${base}/v1/keys/from-page`, {
        method: 'PUT',
        headers: { 'content-type': 'application/json', 'if-none-match': '*' },
        body: JSON.stringify({ value: { hello: 'cors' } }),
      });
      const get = await fetch(`${base}/v1/keys/from-page`);
      return {
        ok: true as const,
        putStatus: put.status,
        getStatus: get.status,
        body: await get.json(),
        etag: get.headers.get('etag'),
        requestId: get.headers.get('x-request-id'),
      };
    } catch (err) {
      return { ok: false as const, error: String(err) };
    }
  }, api);
}

/** Runs in the page: opens an EventSource and resolves with the first record event, or 'error'. */
function firstStreamEvent(page: Page, api: string) {
  return page.evaluate(
    (base) =>
      new Promise<string>((resolve) => {
        const source = new EventSource(`${base}/v1/changes/stream?after=0`);
        source.addEventListener('record', (event) => {
          source.close();
          resolve((event as MessageEvent<string>).data);
        });
        source.onerror = () => {
          source.close();
          resolve('error');
        };
      }),
    api,
  );
}

describeInBrowser('CORS in Chromium', () => {
  it('lets a page of a listed origin write, read headers and follow the stream', async () => {
    const { origin } = await pageServer();
    const { t, url, answered } = await statelog({ STATELOG_CORS_ORIGINS: `http://localhost:1,${origin}` });
    const { page, problems } = await openPage(origin);

    const result = await writeAndRead(page, url);
    expect(result).toMatchObject({ ok: true, putStatus: 200, getStatus: 200, body: { key: 'from-page', value: { hello: 'cors' } } });
    if (!result.ok) return;
    expect(result.etag).toBe(`"${result.body.offset}"`);
    expect(result.requestId).toEqual(expect.any(String));
    // The browser did send a preflight for the PUT, answered without a token.
    expect(answered).toContainEqual({ method: 'OPTIONS', url: '/v1/keys/from-page', status: 204 });

    const event = JSON.parse(await firstStreamEvent(page, url));
    expect(event).toMatchObject({ key: 'from-page', op: 'set', value: { hello: 'cors' } });
    expect(t.app.services.store.position().head).toBe(1);
    expect(problems).toEqual([]);
  });

  it('keeps the answers from a page of an origin not listed, and its writes never reach the log', async () => {
    const allowed = await pageServer();
    const other = await pageServer();
    const { t, url, answered } = await statelog({ STATELOG_CORS_ORIGINS: allowed.origin });
    const { page, problems } = await openPage(other.origin);

    const result = await writeAndRead(page, url);
    expect(result).toEqual({ ok: false, error: expect.stringMatching(/TypeError: Failed to fetch/) });
    // The preflight failed, so the PUT itself was never sent.
    expect(answered.filter((a) => a.method === 'PUT')).toEqual([]);
    expect(t.app.services.store.position().head).toBe(0);
    expect(problems.some((line) => /blocked by CORS policy/.test(line))).toBe(true);
    expect(await firstStreamEvent(page, url)).toBe('error');
  });
});
