import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { json, startApp, type TestApp } from './support/helpers.js';

let t: TestApp;
beforeEach(async () => {
  t = await startApp();
});
afterEach(async () => {
  await t.close();
});

const put = (key: string, value: unknown, headers: Record<string, string> = {}) =>
  t.http
    .put(`/v1/keys/${encodeURIComponent(key)}`)
    .set({ ...json, ...headers })
    .send({ value });
const get = (key: string, headers: Record<string, string> = {}) =>
  t.http.get(`/v1/keys/${encodeURIComponent(key)}`).set(headers);
const del = (key: string, headers: Record<string, string> = {}) =>
  t.http.delete(`/v1/keys/${encodeURIComponent(key)}`).set(headers);

describe('PUT and GET /v1/keys/{key}', () => {
  it('writes a value and reads it back with its offset as ETag', async () => {
    const written = await put('user_1', { balance: 150 });
    expect(written.status).toBe(200);
    expect(written.body).toEqual({ key: 'user_1', offset: 1 });
    expect(written.headers.etag).toBe('"1"');

    const read = await get('user_1');
    expect(read.status).toBe(200);
    expect(read.body).toEqual({ key: 'user_1', value: { balance: 150 }, offset: 1, ts: expect.any(Number) });
    expect(read.headers.etag).toBe('"1"');
    expect(Math.abs(read.body.ts - Date.now())).toBeLessThan(5_000);
  });

  it('stores every kind of JSON value exactly', async () => {
    const values = [null, true, false, 0, -1.5, 2 ** 53 - 1, '', 'text "quoted" ✓', [], [1, [2, { a: null }]], {}, { nested: { deep: [true] } }];
    for (const [i, value] of values.entries()) {
      expect((await put(`v${i}`, value)).status).toBe(200);
      expect((await get(`v${i}`)).body.value).toEqual(value);
    }
  });

  it('round-trips keys with slashes, spaces, percent signs and any Unicode', async () => {
    const keys = ['a/b/c', '/leading', 'trailing/', 'with space', '100%', 'a?b#c&d=e', 'é日本🙂', 'x'.repeat(512), '…'.repeat(170)];
    for (const key of keys) {
      const written = await put(key, key);
      expect(written.status, key).toBe(200);
      expect(written.body.key).toBe(key);
      const read = await get(key);
      expect(read.status, key).toBe(200);
      expect(read.body).toMatchObject({ key, value: key });
    }
    const listed = await t.http.get('/v1/keys').query({ limit: 100 });
    expect(listed.body.items.map((item: { key: string }) => item.key).sort()).toEqual([...keys].sort());
  });

  it('answers 404 not_found for a key never set and for a deleted key', async () => {
    const missing = await get('nothing');
    expect(missing.status).toBe(404);
    expect(missing.body.error.code).toBe('not_found');

    await put('gone', 1);
    expect((await del('gone')).status).toBe(200);
    const read = await get('gone');
    expect(read.status).toBe(404);
    expect(read.body.error.code).toBe('not_found');
  });

  it('answers 304 to If-None-Match with the current offset, 200 after a change', async () => {
    await put('k', 1);
    expect((await get('k', { 'if-none-match': '"1"' })).status).toBe(304);
    expect((await get('k', { 'if-none-match': 'W/"1"' })).status).toBe(304);
    expect((await get('k', { 'if-none-match': '"7", "1"' })).status).toBe(304);
    expect((await get('k', { 'if-none-match': '*' })).status).toBe(304);
    await put('k', 2);
    const changed = await get('k', { 'if-none-match': '"1"' });
    expect(changed.status).toBe(200);
    expect(changed.body.value).toBe(2);
  });

  it('gives every write a higher offset than the last, across keys', async () => {
    const offsets: number[] = [];
    for (let i = 0; i < 20; i++) offsets.push((await put(`k${i % 3}`, i)).body.offset);
    expect(offsets).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
  });
});

describe('DELETE /v1/keys/{key}', () => {
  it('appends a tombstone at a new offset', async () => {
    await put('k', 1);
    const deleted = await del('k');
    expect(deleted.status).toBe(200);
    expect(deleted.body).toEqual({ key: 'k', offset: 2 });
    const stats = await t.http.get('/v1/stats');
    expect(stats.body).toMatchObject({ head: 2, records: 2, liveKeys: 0, tombstones: 1 });
  });

  it('answers 404 and writes nothing when the key has no live value', async () => {
    const missing = await del('never');
    expect(missing.status).toBe(404);
    expect(missing.body.error.code).toBe('not_found');
    await put('k', 1);
    await del('k');
    expect((await del('k')).status).toBe(404);
    expect((await t.http.get('/v1/stats')).body.head).toBe(2);
  });
});

describe('conditional writes', () => {
  it('If-Match "N" and N write only when the live record has offset N', async () => {
    await put('k', 'a');
    expect((await put('k', 'b', { 'if-match': '"1"' })).status).toBe(200);
    expect((await put('k', 'c', { 'if-match': '2' })).status).toBe(200);

    const stale = await put('k', 'd', { 'if-match': '"1"' });
    expect(stale.status).toBe(412);
    expect(stale.body.error).toMatchObject({ code: 'precondition_failed', currentOffset: 3 });
    expect((await get('k')).body).toMatchObject({ value: 'c', offset: 3 });
  });

  it('If-Match * writes only when the key is live, with currentOffset null otherwise', async () => {
    const absent = await put('k', 1, { 'if-match': '*' });
    expect(absent.status).toBe(412);
    expect(absent.body.error).toMatchObject({ code: 'precondition_failed', currentOffset: null });
    await put('k', 1);
    expect((await put('k', 2, { 'if-match': '*' })).status).toBe(200);
  });

  it('If-None-Match * creates only', async () => {
    expect((await put('k', 1, { 'if-none-match': '*' })).status).toBe(200);
    const again = await put('k', 2, { 'if-none-match': '*' });
    expect(again.status).toBe(412);
    expect(again.body.error.currentOffset).toBe(1);
    await del('k');
    expect((await put('k', 3, { 'if-none-match': '*' })).status).toBe(200);
  });

  it('conditional DELETE', async () => {
    await put('k', 1);
    const stale = await del('k', { 'if-match': '"9"' });
    expect(stale.status).toBe(412);
    expect(stale.body.error.currentOffset).toBe(1);
    expect((await del('k', { 'if-match': '"1"' })).status).toBe(200);
  });

  it('a refused write leaves no trace: head does not move', async () => {
    await put('k', 1);
    await put('k', 2, { 'if-match': '"5"' });
    await put('k', 2, { 'if-none-match': '*' });
    await del('k', { 'if-match': '"5"' });
    expect((await t.http.get('/v1/stats')).body).toMatchObject({ head: 1, records: 1 });
    expect((await put('other', 1)).body.offset).toBe(2);
  });

  it('only one of many concurrent compare-and-set writers wins', async () => {
    await put('k', 0);
    const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => put('k', i, { 'if-match': '"1"' })));
    expect(answers.filter((a) => a.status === 200)).toHaveLength(1);
    expect(answers.filter((a) => a.status === 412)).toHaveLength(19);
  });

  it('refuses malformed conditions with 400', async () => {
    for (const headers of <Record<string, string>[]>[{ 'if-match': 'abc' }, { 'if-match': '"1", "2"' }, { 'if-none-match': '"1"' }]) {
      const answer = await put('k', 1, headers);
      expect(answer.status, JSON.stringify(headers)).toBe(400);
      expect(answer.body.error.code).toBe('invalid_request');
    }
  });
});

describe('GET /v1/keys', () => {
  it('lists live keys in byte order with cursor paging and the head', async () => {
    const keys = Array.from({ length: 300 }, (_, i) => `key-${String(i).padStart(3, '0')}`);
    // Non-ASCII keys sort by their UTF-8 bytes: 'Z' < 'a' < 'é' (C3 A9) < '日' (E6 97 A5) < '🙂' (F0 ...).
    const unicode = ['🙂', '日', 'é', 'a', 'Z', 'a b', 'a/b'];
    for (const key of [...keys, ...unicode].reverse()) await put(key, key);
    await del('key-150');

    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const page: { body: { items: { key: string }[]; cursor: string | null; offset: number } } = await t.http
        .get('/v1/keys')
        .query({ limit: 37, ...(cursor ? { cursor } : {}) });
      expect(page.body.offset).toBe(308);
      seen.push(...page.body.items.map((item) => item.key));
      cursor = page.body.cursor;
      pages++;
    } while (cursor !== null);

    const expected = [...keys.filter((k) => k !== 'key-150'), ...unicode].sort((a, b) =>
      Buffer.compare(Buffer.from(a), Buffer.from(b)),
    );
    expect(seen).toEqual(expected);
    expect(pages).toBe(Math.ceil(expected.length / 37));
  });

  it('filters by prefix, including multi-byte prefixes', async () => {
    for (const key of ['user/1', 'user/2', 'user2', 'users', 'usé', 'usé/x', 'other']) await put(key, 1);
    const byPrefix = async (prefix: string) =>
      (await t.http.get('/v1/keys').query({ prefix })).body.items.map((i: { key: string }) => i.key);
    expect(await byPrefix('user/')).toEqual(['user/1', 'user/2']);
    expect(await byPrefix('user')).toEqual(['user/1', 'user/2', 'user2', 'users']);
    expect(await byPrefix('usé')).toEqual(['usé', 'usé/x']);
    expect(await byPrefix('zzz')).toEqual([]);
  });

  it('orders by UTF-8 bytes where UTF-16 order differs, and bounds prefixes at the highest code points', async () => {
    // U+FFFF (EF BF BF) sorts before U+1F600 (F0 ...) in bytes, after it in UTF-16 units.
    const keys = ['\uffff', '\u{1f600}', '\u{10ffff}', '\u{10ffff}a', 'a\ud7ff', 'a\ud7ffz', 'a\ue000', 'b'];
    for (const key of keys) await put(key, key);
    const listed = (await t.http.get('/v1/keys')).body.items.map((i: { key: string }) => i.key);
    expect(listed).toEqual([...keys].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b))));
    expect(listed.indexOf('\uffff')).toBeLessThan(listed.indexOf('\u{1f600}'));
    const byPrefix = async (prefix: string) =>
      (await t.http.get('/v1/keys').query({ prefix })).body.items.map((i: { key: string }) => i.key);
    expect(await byPrefix('\u{10ffff}')).toEqual(['\u{10ffff}', '\u{10ffff}a']);
    expect(await byPrefix('a\ud7ff')).toEqual(['a\ud7ff', 'a\ud7ffz']);
    expect(await byPrefix('\uffff')).toEqual(['\uffff']);
  });

  it('defaults to 100 items and caps limit at 1000', async () => {
    for (let i = 0; i < 120; i++) await put(`k${i}`, i);
    const first = await t.http.get('/v1/keys');
    expect(first.body.items).toHaveLength(100);
    expect(first.body.cursor).toEqual(expect.any(String));
    expect((await t.http.get('/v1/keys').query({ limit: 1001 })).status).toBe(400);
    expect((await t.http.get('/v1/keys').query({ limit: 0 })).status).toBe(400);
  });

  it('refuses a cursor it did not give out', async () => {
    const answer = await t.http.get('/v1/keys').query({ cursor: '!!!' });
    expect(answer.status).toBe(400);
    expect(answer.body.error.code).toBe('invalid_request');
  });
});
