// GET /v1/keys/{key}/history: a key's records still in the log, newest first, paged by
// offset, on both stores, through the real app; and what compaction leaves of it.
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { HISTORY_SCAN_RECORDS } from '../src/store/log-store.js';
import { StatelogClient } from '@statelog/client';
import { json, startApp, type TestApp } from './support/helpers.js';
import { portOf } from './support/http.js';

let t: TestApp | undefined;
afterEach(async () => {
  await t?.close();
  t = undefined;
});

const path = (key: string) => `/v1/keys/${encodeURIComponent(key)}/history`;

async function put(app: TestApp, key: string, value: unknown): Promise<number> {
  const answer = await app.http.put(`/v1/keys/${encodeURIComponent(key)}`).set(json).send({ value });
  expect(answer.status).toBe(200);
  return answer.body.offset as number;
}

async function del(app: TestApp, key: string): Promise<number> {
  const answer = await app.http.delete(`/v1/keys/${encodeURIComponent(key)}`);
  expect(answer.status).toBe(200);
  return answer.body.offset as number;
}

describe('GET /v1/keys/{key}/history', () => {
  it('lists the key’s sets and deletes newest first, and only that key’s', async () => {
    t = await startApp();
    const a1 = await put(t, 'a', { n: 1 });
    await put(t, 'b', 'other');
    const a2 = await put(t, 'a', [1, 2.5]);
    const a3 = await del(t, 'a');
    const a4 = await put(t, 'a', null);
    await put(t, 'ab', 'prefix, not the key');

    const answer = await t.http.get(path('a'));
    expect(answer.status).toBe(200);
    expect(answer.headers['content-type']).toMatch(/^application\/json/);
    expect(answer.body).toEqual({
      records: [
        { offset: a4, key: 'a', op: 'set', value: null, ts: expect.any(Number) },
        { offset: a3, key: 'a', op: 'delete', ts: expect.any(Number) },
        { offset: a2, key: 'a', op: 'set', value: [1, 2.5], ts: expect.any(Number) },
        { offset: a1, key: 'a', op: 'set', value: { n: 1 }, ts: expect.any(Number) },
      ],
      next: null,
      head: 6,
      epoch: t.app.services.store.epoch,
    });
    // Values come back as the key's GET would give them.
    expect(answer.text).toContain(`"value":${JSON.stringify([1, 2.5])}`);
    const ts = answer.body.records.map((record: { ts: number }) => record.ts);
    expect(ts).toEqual([...ts].sort((x, y) => y - x));
  });

  it('pages with limit and before, and next is null on the last page', async () => {
    t = await startApp();
    const offsets: number[] = [];
    for (let i = 0; i < 7; i++) {
      offsets.push(await put(t, 'k', i));
      await put(t, `noise-${i}`, i);
    }
    const seen: number[] = [];
    let before: number | null = null;
    let pages = 0;
    do {
      const answer = await t.http.get(path('k')).query({ limit: 3, ...(before === null ? {} : { before }) });
      expect(answer.status).toBe(200);
      pages += 1;
      seen.push(...answer.body.records.map((record: { offset: number }) => record.offset));
      before = answer.body.next;
      if (before !== null) expect(before).toBe(seen[seen.length - 1]);
    } while (before !== null && pages < 10);
    expect(pages).toBe(3);
    expect(seen).toEqual([...offsets].reverse());

    // before is exclusive; a limit that ends exactly at the oldest record still says more may follow.
    const below = await t.http.get(path('k')).query({ before: offsets[3], limit: 3 });
    expect(below.body.records.map((record: { offset: number }) => record.offset)).toEqual([offsets[2], offsets[1], offsets[0]]);
    const last = await t.http.get(path('k')).query({ before: offsets[0] });
    expect(last.body).toMatchObject({ records: [], next: null });
  });

  it('answers 200 with an empty list for a key the log holds nothing of', async () => {
    t = await startApp();
    await put(t, 'present', 1);
    const answer = await t.http.get(path('never-written'));
    expect(answer.status).toBe(200);
    expect(answer.body).toEqual({ records: [], next: null, head: 1, epoch: t.app.services.store.epoch });
  });

  it('finds keys with slashes, spaces and any Unicode, and not under the key "history"', async () => {
    t = await startApp();
    for (const key of ['a/b', 'with space', 'é日本🙂', 'x/history']) {
      await put(t, key, key);
      const answer = await t.http.get(path(key));
      expect(answer.status, key).toBe(200);
      expect(answer.body.records).toEqual([expect.objectContaining({ key, value: key })]);
    }
    // The key itself may be called "history".
    await put(t, 'history', 1);
    expect((await t.http.get('/v1/keys/history')).body).toMatchObject({ key: 'history', value: 1 });
  });

  it('refuses bad input with 400 and the error body', async () => {
    t = await startApp();
    for (const query of ['limit=0', 'limit=1001', 'limit=x', 'before=0', 'before=-1', 'before=1.5', 'other=1']) {
      const answer = await t.http.get(`${path('k')}?${query}`);
      expect(answer.status, query).toBe(400);
      expect(answer.body.error.code, query).toBe('invalid_request');
    }
    const long = await t.http.get(path('x'.repeat(513)));
    expect(long.status).toBe(400);
    expect(long.body.error.code).toBe('invalid_key');
  });

  it('needs the read role', async () => {
    t = await startApp({ STATELOG_TOKENS: 'read:r-token,write:w-token' });
    expect((await t.http.get(path('k'))).status).toBe(401);
    expect((await t.http.get(path('k')).set('authorization', 'Bearer wrong')).status).toBe(401);
    expect((await t.http.get(path('k')).set('authorization', 'Bearer r-token')).status).toBe(200);
  });

  it('stops a page of large values early and says where to go on', async () => {
    t = await startApp({ STATELOG_MAX_VALUE_BYTES: String(4 * 1024 * 1024) });
    const big = 'v'.repeat(3 * 1024 * 1024);
    const offsets = [];
    for (let i = 0; i < 4; i++) offsets.push(await put(t, 'big', `${i}${big}`));
    const first = await t.http.get(path('big')).query({ limit: 10 });
    expect(first.status).toBe(200);
    expect(first.body.records.length).toBeLessThan(4);
    expect(first.body.next).toBe(first.body.records[first.body.records.length - 1].offset);
    const rest = await t.http.get(path('big')).query({ limit: 10, before: first.body.next });
    const all = [...first.body.records, ...rest.body.records].map((record: { offset: number }) => record.offset);
    expect(all.slice(0, 4)).toEqual([...offsets].reverse().slice(0, all.slice(0, 4).length));
  });
});

describe('a history page’s bounded scan', () => {
  it('examines at most HISTORY_SCAN_RECORDS records, and next goes on below them', async () => {
    t = await startApp();
    const first = await put(t, 'k', 'first');
    const others = HISTORY_SCAN_RECORDS + 500;
    for (let done = 0; done < others; done += 1000) {
      const records = Array.from({ length: Math.min(1000, others - done) }, (_, i) => ({ key: `other-${done + i}`, value: i }));
      expect((await t.http.post('/v1/records').set(json).send({ records })).status).toBe(200);
    }
    const last = await put(t, 'k', 'last');

    const page1 = await t.http.get(path('k'));
    expect(page1.body.records.map((record: { offset: number }) => record.offset)).toEqual([last]);
    // The scan stopped at its bound: the lowest offset it examined.
    expect(page1.body.next).toBe(last - HISTORY_SCAN_RECORDS + 1);
    const page2 = await t.http.get(path('k')).query({ before: page1.body.next });
    expect(page2.body).toMatchObject({ records: [{ offset: first, value: 'first' }], next: null });

    // The client follows next across the short page.
    const client = new StatelogClient({ url: `http://127.0.0.1:${portOf(t.app.server)}` });
    const all = await client.history('k');
    expect(all.records.map((record) => [record.offset, record.op === 'set' ? record.value : null])).toEqual([
      [last, 'last'],
      [first, 'first'],
    ]);
    expect(all.next).toBeNull();
    expect(await client.history('k', { limit: 1 })).toMatchObject({ records: [{ offset: last }], next: page1.body.next });
  });
});

describe('the client’s history()', () => {
  it('returns the key’s records newest first, pages with limit and before, and an empty list for an unknown key', async () => {
    t = await startApp({ STATELOG_TOKENS: 'read:r-token,write:w-token' });
    const url = `http://127.0.0.1:${portOf(t.app.server)}`;
    const writer = new StatelogClient({ url, token: 'w-token' });
    const reader = new StatelogClient({ url, token: 'r-token' });
    const set1 = await writer.put('acct', { balance: 1 });
    const set2 = await writer.put('acct', { balance: 2 });
    const gone = await writer.delete('acct');

    const page = await reader.history<{ balance: number }>('acct');
    expect(page.records).toEqual([
      { offset: gone.offset, key: 'acct', op: 'delete', ts: expect.any(Number) },
      { offset: set2.offset, key: 'acct', op: 'set', value: { balance: 2 }, ts: expect.any(Number) },
      { offset: set1.offset, key: 'acct', op: 'set', value: { balance: 1 }, ts: expect.any(Number) },
    ]);
    expect(page).toMatchObject({ next: null, head: gone.offset, epoch: t.app.services.store.epoch });

    const first = await reader.history('acct', { limit: 2 });
    expect(first.records.map((record) => record.offset)).toEqual([gone.offset, set2.offset]);
    expect(first.next).toBe(set2.offset);
    const rest = await reader.history('acct', { limit: 2, before: first.next! });
    expect(rest).toMatchObject({ records: [{ offset: set1.offset }], next: null });

    expect(await reader.history('nobody')).toMatchObject({ records: [], next: null });
    await expect(new StatelogClient({ url }).history('acct')).rejects.toMatchObject({ status: 401, code: 'unauthorized' });
  });
});

describe('history and compaction', () => {
  it('loses what compaction removed: with no lag, only the latest record is left', async () => {
    t = await startApp({ STATELOG_MIN_COMPACTION_LAG_MS: '0' });
    await put(t, 'k', 1);
    await put(t, 'k', 2);
    const latest = await put(t, 'k', 3);
    expect((await t.http.post('/v1/admin/compact')).body.removed).toBe(2);
    const answer = await t.http.get(path('k'));
    expect(answer.body.records.map((record: { offset: number }) => record.offset)).toEqual([latest]);
  });

  it('keeps every record younger than STATELOG_MIN_COMPACTION_LAG_MS, and the one in force before them', async () => {
    // Margins for a busy machine: the last two writes and the compaction must take less than the lag.
    const lagMs = 1500;
    t = await startApp({ STATELOG_MIN_COMPACTION_LAG_MS: String(lagMs), STATELOG_TOMBSTONE_RETENTION_MS: '0' });
    const old1 = await put(t, 'k', 'old 1');
    const old2 = await put(t, 'k', 'old 2');
    await sleep(lagMs + 200);
    const new1 = await put(t, 'k', 'new 1');
    const new2 = await del(t, 'k');
    expect((await t.http.post('/v1/admin/compact')).body.removed).toBe(1);
    const answer = await t.http.get(path('k'));
    // old 1 went: old 2, which superseded it, is older than the lag. old 2 stays: it was
    // the key's value when the window began.
    expect(answer.body.records.map((record: { offset: number }) => record.offset)).toEqual([new2, new1, old2]);
    expect(old1).toBeLessThan(old2);
  });
});
