// Change pages built for HTTP caches: every answer names the next request in a Link,
// followers at one position ask one URL, history is immutable, and an answer at the
// head never sends a follower back to the URL it just asked.
import { afterEach, describe, expect, it } from 'vitest';
import { startApp, type TestApp } from './support/helpers.js';
import { baseUrl, readAllChanges, writeBatch } from './support/stream-clients.js';

let t: TestApp | undefined;
afterEach(async () => {
  await t?.close();
  t = undefined;
});

async function start(env: Record<string, string> = {}): Promise<string> {
  t = await startApp({ STATELOG_SYNC: 'normal', ...env });
  return baseUrl(t.app);
}

interface Page {
  url: string;
  status: number;
  next: string;
  cacheControl: string | null;
  body: { records: { offset: number; key: string }[]; next: number; head: number; epoch: string };
}

async function page(base: string, url: string, headers: Record<string, string> = {}): Promise<Page> {
  const res = await fetch(`${base}${url}`, { headers });
  const link = res.headers.get('link') ?? '';
  const match = /^<([^>]+)>; rel="next"$/.exec(link);
  expect(match, link).not.toBeNull();
  return { url, status: res.status, next: match![1]!, cacheControl: res.headers.get('cache-control'), body: (await res.json()) as Page['body'] };
}

describe('GET /v1/changes for caches', () => {
  it('names the next request, the same URL for followers that started from different spellings', async () => {
    const base = await start();
    await writeBatch(base, [{ key: 'a/1', value: 1 }, { key: 'b/1', value: 2 }, { key: 'a/2', value: 3 }]);
    const one = await page(base, '/v1/changes?prefix=a/&limit=1&after=0');
    const other = await page(base, '/v1/changes?after=0&limit=1&prefix=a%2F');
    expect(one.body.records.map((r) => r.key)).toEqual(['a/1']);
    expect(one.next).toBe(`/v1/changes?after=1&epoch=${one.body.epoch}&limit=1&prefix=a%2F`);
    expect(other.next).toBe(one.next);
    const second = await page(base, one.next);
    expect(second.body.records.map((r) => r.key)).toEqual(['a/2']);
    expect(second.next).toBe(`/v1/changes?after=3&epoch=${one.body.epoch}&limit=1&prefix=a%2F`);
  });

  it('marks a page that moves the reader on immutable when its URL names the epoch, and keeps it a second without', async () => {
    const base = await start();
    await writeBatch(base, [{ key: 'k', value: 1 }]);
    const first = await page(base, '/v1/changes?after=0');
    expect(first.cacheControl).toBe('public, max-age=1');
    const named = await page(base, `/v1/changes?after=0&epoch=${first.body.epoch}`);
    expect(named.cacheControl).toBe('public, max-age=31536000, immutable');
  });

  it('at the head sends the follower on with a new cursor, never to the URL it asked, and caches it a second at most', async () => {
    const base = await start();
    await writeBatch(base, [{ key: 'k', value: 1 }]);
    const { epoch } = (await page(base, '/v1/changes?after=0')).body;
    const interval = (): number => Math.floor(Date.now() / 1000 / 20);
    const before = interval();
    const atHead = await page(base, `/v1/changes?after=1&epoch=${epoch}&limit=1000`);
    const after = interval();
    expect(atHead.body.records).toEqual([]);
    expect(atHead.cacheControl).toBe('public, max-age=1');
    const cursor = Number(new URL(atHead.next, base).searchParams.get('cursor'));
    expect(cursor).toBeGreaterThanOrEqual(before);
    expect(cursor).toBeLessThanOrEqual(after);
    // Asked again with that cursor (the interval unchanged): the next one is still new.
    const again = await page(base, atHead.next);
    expect(Number(new URL(again.next, base).searchParams.get('cursor'))).toBeGreaterThan(cursor);
    expect(again.next).not.toBe(atHead.next);
    // Once a record arrives, the follower moves on, without a cursor.
    await writeBatch(base, [{ key: 'k', value: 2 }]);
    const moved = await page(base, again.next);
    expect(moved.body.records.map((r) => r.offset)).toEqual([2]);
    expect(moved.next).toBe(`/v1/changes?after=2&epoch=${epoch}&limit=1000`);
  });

  it('names a long poll that ended at the head with its wait, and wakes it with the record', async () => {
    const base = await start();
    const { epoch } = (await page(base, '/v1/changes?after=0')).body;
    const waiting = page(base, `/v1/changes?after=0&epoch=${epoch}&wait=5`);
    await new Promise((resolve) => setTimeout(resolve, 100));
    await writeBatch(base, [{ key: 'k', value: 1 }]);
    const woken = await waiting;
    expect(woken.body.records).toHaveLength(1);
    expect(woken.next).toBe(`/v1/changes?after=1&epoch=${epoch}&limit=1000&wait=5`);
    expect(woken.cacheControl).toBe('public, max-age=31536000, immutable');
  });

  it('is private when tokens are set', async () => {
    const base = await start({ STATELOG_TOKENS: 'read:reader-secret,write:writer-secret' });
    const headers = { authorization: 'Bearer reader-secret' };
    const { epoch } = (await page(base, '/v1/changes?after=0', headers)).body;
    expect((await page(base, `/v1/changes?after=0&epoch=${epoch}`, headers)).cacheControl).toBe('private, max-age=1');
  });

  it('followed link by link, gives every record once, in order, as a reader without links', async () => {
    const base = await start();
    for (let i = 0; i < 5; i++) await writeBatch(base, Array.from({ length: 7 }, (_, j) => ({ key: `p/${(i * 7 + j) % 11}`, value: i })));
    const seen: number[] = [];
    let url = '/v1/changes?after=0&limit=4&prefix=p/';
    for (;;) {
      const answer = await page(base, url);
      seen.push(...answer.body.records.map((r) => r.offset));
      if (answer.body.next >= answer.body.head && answer.body.records.length === 0) break;
      url = answer.next;
    }
    expect(seen).toEqual((await readAllChanges(base, 0, 'p/')).map((r) => r.offset));
  });
});
