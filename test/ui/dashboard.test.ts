// The dashboard (/ui) end to end, in real headless Chromium against a live server built
// by the production factory: stats and chart, live key updates through the changes
// followed by Link (and resumed after a drop), prefix filter and paging, the token
// prompt, and compaction from the button. Screenshots go to test-artifacts/dashboard/.
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { json, startApp, tempDir, type StartOptions, type TestApp } from '../support/helpers.js';
import { writeTokenFile } from '../support/token-file.js';
import { ARTIFACTS, DESKTOP, describeInBrowser, failedLoad, launchChromium, newVisit, PHONE, SKIP_BROWSER_TESTS, type Visit, type VisitOptions } from './browser.js';
import { bearer, portOf } from '../support/http.js';

const TOKENS = { read: 'ui-read-token', admin: 'ui-admin-token' };
const TOKENS_ENV = `read:${TOKENS.read},admin:${TOKENS.admin}`;

let browser: Browser;
const visits: Visit[] = [];
const apps: TestApp[] = [];

beforeAll(async () => {
  if (SKIP_BROWSER_TESTS) return;
  // dist/ui is built by the project's globalSetup (test/support/ui-global-setup.ts).
  browser = await launchChromium();
});
afterEach(async () => {
  for (const visit of visits.splice(0)) await visit.context.close();
  for (const t of apps.splice(0)) await t.close();
});
afterAll(async () => {
  await browser?.close();
});

async function server(env: Record<string, string> = {}, prepare?: StartOptions['prepare']): Promise<TestApp> {
  // No load shedding: on a busy machine (Chromium shares its two cores) a shed poll
  // would show as trouble on the page; shedding has its own tests.
  const t = await startApp({ STATELOG_MAX_EVENT_LOOP_DELAY_MS: '0', ...env }, { prepare });
  apps.push(t);
  return t;
}

async function visit(t: TestApp, options: VisitOptions = {}): Promise<Visit> {
  const v = await newVisit(browser, `http://127.0.0.1:${portOf(t.app.server)}`, options);
  visits.push(v);
  await v.page.goto('/ui/');
  return v;
}

const put = (t: TestApp, key: string, value: unknown, token?: string) =>
  t.http
    .put(`/v1/keys/${encodeURIComponent(key)}`)
    .set({ ...json, ...(token ? bearer(token) : {}) })
    .send({ value })
    .expect(200);

const del = (t: TestApp, key: string) => t.http.delete(`/v1/keys/${encodeURIComponent(key)}`).expect(200);

async function stats(t: TestApp, token?: string): Promise<{ head: number; records: number; liveKeys: number }> {
  return (await t.http.get('/v1/stats').set(token ? bearer(token) : {}).expect(200)).body;
}

/** Waits until a figure of the health panel shows this raw value. */
async function expectStat(page: Page, id: string, value: number): Promise<void> {
  await page.waitForSelector(`#stat-${id}[data-value="${value}"]`);
}

/** Polls a reading of the page until it passes (as playwright's own expect would). */
const poll = <T>(read: () => Promise<T>, timeout = 5000) => expect.poll(read, { timeout, interval: 50 });

const row = (page: Page, key: string) => page.locator(`#key-rows tr[data-key="${key}"]`);
const shownKeys = (page: Page) => page.locator('#key-rows tr').evaluateAll((rows) => rows.map((r) => (r as HTMLElement).dataset.key));
const streamLive = (page: Page) => page.waitForSelector('#stream-state[data-state="live"]');

describeInBrowser('the dashboard on an open server', () => {
  it('shows the stats and the chart, reads well at 1280×800 and 390 px, and logs no errors', async () => {
    const t = await server();
    for (let i = 1; i <= 6; i += 1) await put(t, `user_${i}`, { name: `user ${i}`, balance: i * 100 });
    await put(t, 'user_1', { name: 'user 1', balance: 150 });
    await put(t, 'user_1', { name: 'user 1', balance: 175 });
    await del(t, 'user_6');
    const expected = await stats(t);

    const { page, problems } = await visit(t);
    await page.locator('#sign-in').waitFor({ state: 'hidden' });
    await expectStat(page, 'head', expected.head);
    await expectStat(page, 'records', expected.records);
    await expectStat(page, 'live-keys', 5);
    await expectStat(page, 'tombstones', 1);
    await poll(() => page.locator('#stat-dirty-ratio').textContent()).toMatch(/%$/);
    await expectStat(page, 'horizon', 0);
    await poll(() => page.locator('#stat-db-bytes').textContent()).toMatch(/\d (B|KiB|MiB)$/);
    await poll(() => page.locator('#stat-last-compaction').textContent()).toBe('none since the server started');
    await poll(() => page.locator('#connection').textContent()).toMatch(/open server, no token needed/);
    expect(await shownKeys(page)).toEqual(['user_1', 'user_2', 'user_3', 'user_4', 'user_5']);
    await poll(() => row(page, 'user_1').locator('td.value').textContent()).toBe('{"name":"user 1","balance":175}');
    await poll(() => page.locator('#compact').isEnabled()).toBe(true);

    // The chart fills in as the page polls (every 2 s): a second sample after a write.
    await put(t, 'user_7', 7);
    await page.waitForFunction(() => (document.querySelector('polyline.records')?.getAttribute('points') ?? '').split(' ').length >= 2, null, { timeout: 5000 });
    await poll(() => page.locator('#chart svg').getAttribute('role')).toBe('img');
    await poll(() => page.locator('#chart svg title').textContent()).toMatch(/records and \d+ live keys$/);

    // Landmarks, headings, labelled controls, a captioned table.
    const outline = await page.evaluate(() => ({
      h1: document.querySelectorAll('h1').length,
      h2: [...document.querySelectorAll('h2')].filter((h) => h.closest('[hidden]') === null).map((h) => h.textContent),
      landmarks: ['header', 'main', 'footer', 'nav', 'form[role=search]'].map((s) => document.querySelectorAll(s).length),
      unlabelled: [...document.querySelectorAll('input, select')].filter((c) => (c as HTMLInputElement).labels?.length === 0).map((c) => c.id),
      caption: document.querySelector('#key-table caption')?.textContent,
      nameless: [...document.querySelectorAll('button')].filter((b) => (b.textContent ?? '').trim() === '').length,
    }));
    expect(outline).toEqual({
      h1: 1,
      h2: ['Log health', 'Records in the log vs live keys', 'Consumers', 'Keys'],
      landmarks: [1, 1, 1, 1, 1],
      unlabelled: [],
      caption: expect.stringMatching(/^Live keys, page 1: 6 shown, values update live$/),
      nameless: 0,
    });

    await page.screenshot({ path: join(ARTIFACTS, 'desktop-1280x800.png') });
    const desktopOverflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    expect(desktopOverflow).toBeLessThanOrEqual(0);

    // Keyboard: the first Tab reaches the skip link, which moves to the content.
    await page.keyboard.press('Tab');
    expect(await page.evaluate(() => document.activeElement?.textContent)).toBe('Skip to content');
    await page.keyboard.press('Enter');
    expect(await page.evaluate(() => document.activeElement?.id)).toBe('main');

    await page.setViewportSize(PHONE);
    await page.waitForTimeout(100);
    const phoneOverflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    expect(phoneOverflow).toBeLessThanOrEqual(0);
    await page.screenshot({ path: join(ARTIFACTS, 'phone-390.png'), fullPage: true });
    await page.setViewportSize(DESKTOP);
    await page.emulateMedia({ colorScheme: 'dark' });
    await page.screenshot({ path: join(ARTIFACTS, 'desktop-1280x800-dark.png') });

    expect(problems).toEqual([]);
  });

  it('shows a key written through the API at once, without a reload, and follows its changes', async () => {
    const t = await server();
    await put(t, 'a', 1);
    const { page, problems } = await visit(t);
    await streamLive(page);
    await page.evaluate(() => ((window as unknown as { notReloaded: boolean }).notReloaded = true));

    const written = await put(t, 'live/new', { status: 'fresh' });
    await poll(() => row(page, 'live/new').locator('td.value').textContent()).toBe('{"status":"fresh"}');
    await poll(() => row(page, 'live/new').locator('td.num').textContent()).toBe(String(written.body.offset));
    expect(await shownKeys(page)).toEqual(['a', 'live/new']);

    await put(t, 'live/new', { status: 'changed' });
    await poll(() => row(page, 'live/new').locator('td.value').textContent()).toBe('{"status":"changed"}');
    await put(t, '0-first', true);
    await poll(() => row(page, '0-first').count()).toBe(1);
    expect(await shownKeys(page)).toEqual(['0-first', 'a', 'live/new']);

    await del(t, 'live/new');
    await poll(() => row(page, 'live/new').count()).toBe(0);
    expect(await page.evaluate(() => (window as unknown as { notReloaded?: boolean }).notReloaded)).toBe(true);
    expect(problems).toEqual([]);
  });

  it('follows the changes by Link, and after the connection drops asks again where it was, missing nothing', async () => {
    const asked: string[] = [];
    const t = await server({}, (app) => {
      app.addHook('onRequest', async (req) => {
        if (req.url.startsWith('/v1/changes')) asked.push(req.url);
      });
    });
    const { page, problems } = await visit(t);
    await streamLive(page);
    const first = await put(t, 'r/1', 1);
    await poll(() => row(page, 'r/1').count()).toBe(1);

    // Every connection is cut; a write lands while the page is away.
    t.app.server.closeAllConnections();
    const second = await put(t, 'r/2', 2);
    await poll(() => row(page, 'r/2').count(), 10_000).toBe(1);
    await poll(() => row(page, 'r/2').locator('td.num').textContent()).toBe(String(second.body.offset));
    await streamLive(page);

    // Long polls only, each after where the last left off: never back, and once from r/1's offset.
    expect(asked.every((url) => url.startsWith('/v1/changes?'))).toBe(true);
    const afters = asked.map((url) => Number(new URL(url, 'http://x').searchParams.get('after')));
    expect(afters).toEqual([...afters].sort((a, b) => a - b));
    expect(afters).toContain(first.body.offset);
    // After the first, each asks what the server's Link named: with its epoch and a wait.
    expect(asked.slice(1).every((url) => /[?&]epoch=[0-9a-f]+&/.test(url) && /&wait=30$/.test(url))).toBe(true);
    expect(await shownKeys(page)).toEqual(['r/1', 'r/2']);
    // A fetch cut by the server may be logged by Chromium as a network failure; nothing else.
    expect(problems.filter((p) => !/net::ERR_/.test(p))).toEqual([]);
  });

  it('filters by prefix and pages through keys, updating only the keys of the page shown', async () => {
    const t = await server();
    for (let i = 1; i <= 12; i += 1) await put(t, `a/${String(i).padStart(2, '0')}`, i);
    await put(t, 'b/1', 'b');
    const { page, problems } = await visit(t);
    await poll(() => row(page, 'b/1').count()).toBe(1);

    await page.locator('#prefix').fill('a/');
    await page.locator('#prefix').press('Enter');
    await poll(() => row(page, 'b/1').count()).toBe(0);
    expect(await shownKeys(page)).toHaveLength(12);
    await page.locator('#page-size').selectOption('10');
    await poll(() => page.locator('#key-rows tr').count()).toBe(10);
    await poll(() => page.locator('#keys-caption').textContent()).toBe('Live keys starting with “a/”, page 1: 10 shown, values update live');
    await poll(() => page.locator('#page-prev').isDisabled()).toBe(true);
    await streamLive(page);

    // Live: a key of another prefix never shows; one inside this page's range does,
    // pushing the page's last key out to the next page (10 rows, as the page size
    // says); one past its last key belongs to the next page.
    await put(t, 'b/2', 'b');
    await put(t, 'a/99', 99);
    await put(t, 'a/055', 55);
    await poll(() => row(page, 'a/055').count()).toBe(1);
    const first = await shownKeys(page);
    expect(first).toEqual(['a/01', 'a/02', 'a/03', 'a/04', 'a/05', 'a/055', 'a/06', 'a/07', 'a/08', 'a/09']);
    await poll(() => page.locator('#keys-caption').textContent()).toBe('Live keys starting with “a/”, page 1: 10 shown, values update live');
    // Past the page's new last key: the next page's.
    await put(t, 'a/095', 95);
    await put(t, 'a/005', 5);
    await poll(() => row(page, 'a/005').count()).toBe(1);
    expect(await shownKeys(page)).toEqual(['a/005', ...first.slice(0, 9)]);
    expect(await row(page, 'a/095').count()).toBe(0);

    await page.locator('#page-next').click();
    await poll(() => page.locator('#page-label').textContent()).toBe('Page 2');
    await poll(() => shownKeys(page)).toEqual(['a/09', 'a/095', 'a/10', 'a/11', 'a/12', 'a/99']);
    await poll(() => page.locator('#page-next').isDisabled()).toBe(true);
    // The last page fills up live to the page size, then has a next page.
    for (const key of ['a/13', 'a/14', 'a/15', 'a/16']) await put(t, key, 1);
    await poll(() => shownKeys(page)).toEqual(['a/09', 'a/095', 'a/10', 'a/11', 'a/12', 'a/13', 'a/14', 'a/15', 'a/16', 'a/99']);
    await put(t, 'a/100', 100);
    await poll(() => row(page, 'a/100').count()).toBe(1);
    expect(await shownKeys(page)).toEqual(['a/09', 'a/095', 'a/10', 'a/100', 'a/11', 'a/12', 'a/13', 'a/14', 'a/15', 'a/16']);
    await poll(() => page.locator('#page-next').isDisabled()).toBe(false);
    await page.locator('#page-prev').click();
    await poll(() => page.locator('#page-label').textContent()).toBe('Page 1');
    await poll(() => shownKeys(page)).toEqual(['a/005', ...first.slice(0, 9)]);

    await page.locator('#prefix').fill('nothing/');
    await page.locator('#filter button[type=submit]').click();
    await page.locator('#keys-empty').waitFor({ state: 'visible' });
    await poll(() => page.locator('#keys-empty').textContent()).toBe('No live keys match.');
    expect(problems).toEqual([]);
  });
});

describeInBrowser('the consumers panel', () => {
  it('lists consumers with position, lag, last commit and hold, following commits and releases', async () => {
    const t = await server({ STATELOG_TOMBSTONE_RETENTION_MS: '0', STATELOG_CONSUMER_HOLD_MAX_RECORDS: '3' });
    const commit = (name: string, body: object) => t.http.put(`/v1/consumers/${name}`).set(json).send(body).expect(200);
    for (let i = 0; i < 4; i += 1) await put(t, `k${i}`, i);
    const { page, problems } = await visit(t);
    await page.waitForSelector('#consumers-empty:not([hidden])');

    await commit('mailer', { offset: 4 });
    await commit('indexer', { offset: 2, hold: true });
    const cells = (name: string) =>
      page.locator(`#consumer-rows tr[data-name="${name}"] td`).evaluateAll((tds) => tds.map((td) => (td as HTMLElement).dataset.value ?? td.textContent));
    // The page polls every 2 s.
    await poll(() => cells('indexer'), 6000).toEqual(['indexer', '2', '2', expect.any(String), 'held']);
    expect(await cells('mailer')).toEqual(['mailer', '4', '0', expect.any(String), 'none']);
    expect(await page.locator('#consumer-rows tr').evaluateAll((rows) => rows.map((r) => (r as HTMLElement).dataset.name))).toEqual(['indexer', 'mailer']);
    await poll(() => page.locator('#consumer-rows tr[data-name="indexer"] td.hold').textContent()).toBe('holds compaction');
    expect(await page.locator('#consumers-empty').isHidden()).toBe(true);

    // Two more writes: indexer's lag (4) passes the bound, and its hold is released.
    await put(t, 'k4', 4);
    await put(t, 'k5', 5);
    await poll(() => cells('indexer'), 6000).toEqual(['indexer', '2', '4', expect.any(String), 'released']);
    await poll(() => page.locator('#consumer-rows tr[data-name="indexer"] td.hold').textContent()).toMatch(/^released .* \(too far behind\)$/);
    await page.locator('#consumers').screenshot({ path: join(ARTIFACTS, 'consumers.png') });
    expect(problems).toEqual([]);
  });
});

describeInBrowser('key names in the table', () => {
  it('wrap only after a separator, never inside a name, at 390 px', async () => {
    const t = await server();
    const keys = ['tenant_acme/orders/2026-12-01/order_000123/line_items/shipping_address', 'x'.repeat(80), 'short'];
    for (const key of keys) await put(t, key, 1);
    const { page, problems } = await visit(t, { viewport: PHONE });
    await poll(() => row(page, 'short').count()).toBe(1);
    for (const key of keys) {
      // Where each line of the cell starts: the characters whose box sits lower than the one before.
      const breaks = await row(page, key).locator('th.key').evaluate((cell) => {
        const text = cell.textContent ?? '';
        const range = document.createRange();
        const starts: number[] = [];
        let top = -Infinity;
        let index = 0;
        for (const node of Array.from(cell.childNodes)) {
          if (node.nodeType !== Node.TEXT_NODE) continue;
          for (let i = 0; i < node.textContent!.length; i += 1, index += 1) {
            range.setStart(node, i);
            range.setEnd(node, i + 1);
            const box = range.getBoundingClientRect();
            if (box.top > top + 2 && top !== -Infinity) starts.push(index);
            top = Math.max(top, box.top);
          }
        }
        return { starts, text, title: cell.getAttribute('title') };
      });
      expect(breaks.text, key).toBe(key);
      expect(breaks.title, key).toBe(key);
      for (const start of breaks.starts) expect('/:._-', `${key} broken before ${start}`).toContain(key[start - 1]);
    }
    expect(problems).toEqual([]);
  });
});

describeInBrowser('the dashboard on a server with tokens', () => {
  it('asks for a token, says plainly that a bad one is refused, keeps a good one for the tab only', async () => {
    const t = await server({ STATELOG_TOKENS: TOKENS_ENV });
    await put(t, 'k', 1, TOKENS.admin);
    const { page, problems, requests } = await visit(t);

    await page.locator('#sign-in').waitFor({ state: 'visible' });
    await page.locator('#dashboard').waitFor({ state: 'hidden' });
    await poll(() => page.locator('#token').evaluate((el) => el === document.activeElement)).toBe(true);
    await poll(() => page.locator('#connection').textContent()).toBe('Not signed in');

    await page.locator('#token').fill('not-a-token');
    await page.locator('#token').press('Enter');
    await poll(() => page.locator('#token-error').textContent()).toBe('This token was not accepted (401 unauthorized). Check it and try again.');
    await poll(() => page.locator('#token').getAttribute('aria-invalid')).toBe('true');
    await page.locator('#dashboard').waitFor({ state: 'hidden' });
    expect(await page.evaluate(() => sessionStorage.getItem('statelog.token'))).toBeNull();
    await page.screenshot({ path: join(ARTIFACTS, 'token-refused.png') });

    await page.locator('#token').fill(TOKENS.admin);
    await page.locator('#sign-in button[type=submit]').click();
    await page.locator('#dashboard').waitFor({ state: 'visible' });
    await page.locator('#sign-in').waitFor({ state: 'hidden' });
    await expectStat(page, 'live-keys', 1);
    await poll(() => row(page, 'k').count()).toBe(1);
    await poll(() => page.locator('#connection').textContent()).toMatch(/signed in with a token/);
    expect(await page.evaluate(() => sessionStorage.getItem('statelog.token'))).toBe(TOKENS.admin);
    expect(await page.evaluate(() => localStorage.length)).toBe(0);

    // Kept for the tab: a reload goes straight to the dashboard.
    await page.reload();
    await page.locator('#dashboard').waitFor({ state: 'visible' });
    await expectStat(page, 'live-keys', 1);
    await streamLive(page);

    // The token travels only in the Authorization header, never in a URL.
    const api = requests.filter((r) => new URL(r.url).pathname.startsWith('/v1/'));
    expect(api.length).toBeGreaterThan(3);
    for (const r of requests) expect(r.url).not.toContain(TOKENS.admin);
    expect(api.filter((r) => r.headers.authorization === `Bearer ${TOKENS.admin}`).length).toBeGreaterThan(2);

    await page.locator('#sign-out').click();
    await page.locator('#sign-in').waitFor({ state: 'visible' });
    expect(await page.evaluate(() => sessionStorage.getItem('statelog.token'))).toBeNull();

    // Chromium logs each 401 answer (the first look, the bad token) as a failed load.
    expect(problems.filter((p) => !failedLoad(401).test(p))).toEqual([]);
    expect(problems.filter((p) => failedLoad(401).test(p))).toHaveLength(2);
  });

  it('runs a compaction from the button with an admin token, and the records count drops', async () => {
    const t = await server({
      STATELOG_TOKENS: TOKENS_ENV,
      STATELOG_MIN_COMPACTION_LAG_MS: '0',
      STATELOG_TOMBSTONE_RETENTION_MS: '0',
    });
    for (let i = 0; i < 30; i += 1) await put(t, 'counter', i, TOKENS.admin);
    await put(t, 'gone', 'soon', TOKENS.admin);
    await t.http.delete('/v1/keys/gone').set(bearer(TOKENS.admin)).expect(200);
    const before = await stats(t, TOKENS.admin);
    expect(before.records).toBe(32);

    const { page, problems } = await visit(t, { token: TOKENS.admin });
    await expectStat(page, 'records', 32);
    await expectStat(page, 'live-keys', 1);

    // From the keyboard.
    await page.locator('#compact').focus();
    await page.keyboard.press('Enter');
    await poll(() => page.locator('#compact-result').textContent()).toMatch(/^Compaction removed 31 records \(1 tombstone\) in [\d.]+ (ms|s)\.$/);
    await expectStat(page, 'records', 1);
    await expectStat(page, 'horizon', 32);
    await expectStat(page, 'tombstones', 0);
    await poll(() => page.locator('#stat-last-compaction').textContent()).toContain('removed 31 records (1 tombstone)');
    await poll(() => page.locator('#stat-last-compaction').textContent()).toContain('compact now');
    expect((await stats(t, TOKENS.admin)).records).toBe(1);
    await poll(() => page.locator('#compact').isEnabled()).toBe(true);

    // A second tooth of the saw: more writes, seen by a poll, then compacted away.
    for (let i = 0; i < 20; i += 1) await put(t, 'counter', i, TOKENS.admin);
    await expectStat(page, 'records', 21);
    await page.locator('#compact').click();
    await expectStat(page, 'records', 1);
    const points = await page.locator('polyline.records').getAttribute('points');
    expect(points!.split(' ').length).toBeGreaterThanOrEqual(4);
    await page.screenshot({ path: join(ARTIFACTS, 'desktop-after-compaction.png') });

    expect(problems).toEqual([]);
  });

  it('refuses compaction to a read token, says why, and remembers it for the tab', async () => {
    const t = await server({ STATELOG_TOKENS: TOKENS_ENV, STATELOG_TOMBSTONE_RETENTION_MS: '0' });
    for (let i = 0; i < 5; i += 1) await put(t, 'x', i, TOKENS.admin);
    const { page, problems, requests } = await visit(t, { token: TOKENS.read });
    await expectStat(page, 'records', 5);

    await page.locator('#compact').click();
    await poll(() => page.locator('#compact').isDisabled()).toBe(true);
    await poll(() => page.locator('#compact-note').textContent()).toBe('Compaction needs an admin token; this token has the read role.');
    expect((await stats(t, TOKENS.read)).records).toBe(5);
    await expectStat(page, 'records', 5);

    await page.reload();
    await expectStat(page, 'records', 5);
    await poll(() => page.locator('#compact').isDisabled()).toBe(true);
    await poll(() => page.locator('#compact-note').textContent()).toMatch(/this token has the read role/);
    const compactCalls = requests.filter((r) => r.method === 'POST' && r.url.endsWith('/v1/admin/compact'));
    expect(compactCalls).toHaveLength(1);

    expect(problems.filter((p) => !failedLoad(403).test(p))).toEqual([]);
    expect(problems).toHaveLength(1);
  });

  it('given a token limited to key prefixes, shows that scope and only its keys', async () => {
    const dir = tempDir();
    const file = writeTokenFile(dir, [
      { name: 'ui-scoped', secret: 'ui-scoped-token', role: 'read', prefixes: ['team/a/'] },
      { name: 'ui-root', secret: TOKENS.admin, role: 'admin' },
    ]);
    const t = await server({ STATELOG_TOKENS_FILE: file });
    for (const key of ['team/a/1', 'team/b/1', 'team/a/2', 'other']) await put(t, key, key, TOKENS.admin);
    const { page, problems } = await visit(t, { token: 'ui-scoped-token' });

    await poll(() => shownKeys(page)).toEqual(['team/a/1', 'team/a/2']);
    await poll(() => page.locator('#stats-updated').textContent()).toMatch(/only the keys starting with team\/a\//);
    await poll(() => page.locator('#connection').textContent()).toMatch(/limited to keys starting with team\/a\//);
    expect(await page.locator('#compact').isDisabled()).toBe(true);
    await streamLive(page);
    await put(t, 'team/b/2', 1, TOKENS.admin);
    await put(t, 'team/a/3', 3, TOKENS.admin);
    await poll(() => shownKeys(page)).toEqual(['team/a/1', 'team/a/2', 'team/a/3']);
    await page.screenshot({ path: join(ARTIFACTS, 'scoped-token.png') });
    // The one refusal is the stats' 403, which the page reads as the token's scope.
    expect(problems.filter((p) => !failedLoad(403).test(p))).toEqual([]);
  });
});
