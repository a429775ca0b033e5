// Chromium's own EventSource against the change stream: when it reconnects to a
// position compaction has passed, it receives `event: reset` with the reason (a 410
// would show it only a bare `error`), and a cache-buster in the URL does not close it.
import type { Browser } from 'playwright-core';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { json, startApp, type TestApp } from '../support/helpers.js';
import { cuttableProxy, type CuttableProxy } from '../support/flaky-proxy.js';
import { portOf } from '../support/http.js';
import { describeInBrowser, launchChromium, newVisit, SKIP_BROWSER_TESTS, type Visit } from './browser.js';

let browser: Browser;
let t: TestApp | undefined;
let proxy: CuttableProxy | undefined;
let visit: Visit | undefined;

beforeAll(async () => {
  if (SKIP_BROWSER_TESTS) return;
  browser = await launchChromium();
});
afterEach(async () => {
  await visit?.context.close();
  await proxy?.close();
  await t?.close();
  visit = proxy = t = undefined;
});
afterAll(async () => {
  await browser?.close();
});

interface Seen {
  type: string;
  id: string;
  data: string;
}

declare global {
  interface Window {
    seen: Seen[];
    source: EventSource;
  }
}

describeInBrowser("a browser's EventSource on the change stream", () => {
  it('reconnects behind the horizon with Last-Event-ID and receives the reset with its reason', { timeout: 60_000 }, async () => {
    t = await startApp({ STATELOG_MAX_EVENT_LOOP_DELAY_MS: '0', STATELOG_TOMBSTONE_RETENTION_MS: '0' });
    const write = (records: unknown[]) => t!.http.post('/v1/records').set(json).send({ records }).expect(200);
    await write([{ key: 'a', value: 1 }, { key: 'b', value: 2 }]);
    // Through a proxy that can cut the connection as a network would, the page and its
    // stream from one origin.
    const lastEventIds: (string | undefined)[] = [];
    t.app.server.on('request', (req: { url?: string; headers: Record<string, string | string[] | undefined> }) => {
      if (req.url?.includes('_=1764400000000')) lastEventIds.push(req.headers['last-event-id'] as string | undefined);
    });
    proxy = await cuttableProxy('127.0.0.1', portOf(t.app.server));
    visit = await newVisit(browser, `http://127.0.0.1:${proxy.port}`);
    const { page } = visit;
    await page.goto('/ui/');
    await page.evaluate(() => {
      window.seen = [];
      // The cache-buster an EventSource polyfill would add: ignored, not a 400.
      const source = new EventSource('/v1/changes/stream?after=0&_=1764400000000');
      window.source = source;
      for (const type of ['open', 'error', 'record', 'progress', 'reset']) {
        source.addEventListener(type, (event) => {
          const message = event as MessageEvent<string>;
          window.seen.push({ type, id: message.lastEventId ?? '', data: typeof message.data === 'string' ? message.data : '' });
          if (type === 'reset') source.close();
        });
      }
    });
    const seen = () => page.evaluate(() => window.seen);
    await expect.poll(async () => (await seen()).filter((e) => e.type === 'record').map((e) => e.id), { timeout: 10_000 }).toEqual(['1', '2']);

    // The network goes away; meanwhile a delete marker past the reader is compacted away.
    await proxy.cut();
    await expect.poll(async () => (await seen()).some((e) => e.type === 'error'), { timeout: 10_000 }).toBe(true);
    await write([{ key: 'gone', value: 1 }, { key: 'gone', op: 'delete' }]);
    const compacted = (await t.http.post('/v1/admin/compact').expect(200)).body as { horizon: number };
    expect(compacted.horizon).toBe(4);
    await proxy.restore();

    await expect.poll(async () => (await seen()).at(-1)?.type, { timeout: 15_000 }).toBe('reset');
    const events = await seen();
    const afterCut = events.slice(events.findIndex((e) => e.type === 'error'));
    // Reconnected (open), then at once the reset: no record of the compacted range.
    expect(afterCut.filter((e) => e.type === 'record')).toEqual([]);
    expect(afterCut.map((e) => e.type)).toContain('open');
    const reset = JSON.parse(events.at(-1)!.data) as { error: Record<string, unknown> };
    expect(reset.error).toMatchObject({ code: 'offset_compacted', horizon: 4, epoch: t.app.services.store.epoch });
    expect(await page.evaluate(() => window.source.readyState)).toBe(2); // CLOSED
    // The reconnect carried the last id the page had seen.
    expect(lastEventIds).toEqual([undefined, '2']);
  });
});
