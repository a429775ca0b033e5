import http from 'node:http';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startApp, type TestApp } from './support/helpers.js';
import { baseUrl, writeBatch, type ChangesAnswer } from './support/stream-clients.js';

let t: TestApp;
let base: string;
beforeEach(async () => {
  t = await startApp({ STATELOG_SYNC: 'normal' });
  base = baseUrl(t.app);
});
afterEach(async () => {
  await t.close();
});

async function changes(query: string): Promise<{ status: number; body: ChangesAnswer & { error?: Record<string, unknown> } }> {
  const res = await fetch(`${base}/v1/changes?${query}`);
  return { status: res.status, body: (await res.json()) as ChangesAnswer & { error?: Record<string, unknown> } };
}

const offsets = (body: ChangesAnswer): number[] => body.records.map((r) => r.offset);

async function put(key: string, value: unknown): Promise<void> {
  const res = await fetch(`${base}/v1/keys/${encodeURIComponent(key)}`, {
    method: 'PUT',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ value }),
  });
  expect(res.status).toBe(200);
}

describe('GET /v1/changes', () => {
  beforeEach(async () => {
    // offsets 1..5, then a delete at 6
    await writeBatch(base, ['a/1', 'b/1', 'a/2', 'b/2', 'a/3'].map((key, i) => ({ key, value: i + 1 })));
    await writeBatch(base, [{ key: 'a/1', op: 'delete' }]);
  });

  it('pages with next = the last offset of a full page, else the head', async () => {
    const epoch = t.app.services.store.epoch;
    expect((await changes('after=0&limit=2')).body).toMatchObject({ next: 2, head: 6, epoch });
    const second = (await changes('after=2&limit=2')).body;
    expect([offsets(second), second.next]).toEqual([[3, 4], 4]);
    const last = (await changes('after=4&limit=5')).body;
    expect([offsets(last), last.next, last.head]).toEqual([[5, 6], 6, 6]);
    const caughtUp = (await changes('after=6')).body;
    expect(caughtUp).toEqual({ records: [], next: 6, head: 6, epoch });
  });

  it('returns records in the contract shape, tombstones included without a value', async () => {
    const { body } = await changes('after=4');
    expect(body.records[0]).toEqual({ offset: 5, key: 'a/3', op: 'set', value: 5, ts: expect.any(Number) });
    expect(body.records[1]).toEqual({ offset: 6, key: 'a/1', op: 'delete', ts: expect.any(Number) });
    expect(Object.keys(body.records[0]!)).toEqual(['offset', 'key', 'op', 'value', 'ts']);
  });

  it('moves a filtered reader to the head when its page is not full', async () => {
    const full = (await changes('after=0&prefix=a/&limit=2')).body;
    expect([offsets(full), full.next]).toEqual([[1, 3], 3]);
    const rest = (await changes('after=3&prefix=a/&limit=2')).body;
    expect([offsets(rest), rest.next]).toEqual([[5, 6], 6]);
    // Nothing with the prefix after 4, yet the reader moves on to the head.
    const none = (await changes('after=4&prefix=b/')).body;
    expect([offsets(none), none.next]).toEqual([[], 6]);
  });

  it('uses limit 1000 by default and allows up to 10000', async () => {
    for (let i = 0; i < 3; i++) {
      await writeBatch(base, Array.from({ length: 1000 }, (_, j) => ({ key: `bulk/${i}/${j}`, value: j })));
    }
    const byDefault = (await changes('after=0')).body;
    expect([byDefault.records.length, byDefault.next]).toEqual([1000, 1000]);
    const most = (await changes('after=0&limit=10000')).body;
    expect([most.records.length, most.next, most.head]).toEqual([3006, 3006, 3006]);
  });

  it('ends a page of large values early, as a full page whose next is its last record', async () => {
    const big = 'v'.repeat(1000 * 1000);
    for (let i = 0; i < 10; i++) await put(`big/${i}`, big);
    const { body } = await changes('after=6&limit=100');
    expect(body.records.length).toBeGreaterThan(0);
    expect(body.records.length).toBeLessThan(10);
    expect(body.next).toBe(body.records[body.records.length - 1]!.offset);
    const rest = (await changes(`after=${body.next}&limit=100`)).body;
    expect(rest.records[0]!.offset).toBe(body.next + 1);
  });

  it('refuses bad query values with 400 invalid_request', async () => {
    const bad = [
      'limit=0', 'limit=10001', 'limit=x', 'wait=61', 'wait=-1', 'wait=soon', 'after=-1', 'after=1.5',
      'after=abc', 'after=9007199254740992', 'prefix=%7F', 'epoch=', 'unknown=1', 'after=1&after=2',
    ];
    for (const query of bad) {
      const { status, body } = await changes(query);
      expect([status, body.error?.code], query).toEqual([400, 'invalid_request']);
    }
  });
});

describe('GET /v1/changes?wait (long poll)', () => {
  it('wakes within 100 ms of a commit', async () => {
    const poll = fetch(`${base}/v1/changes?after=0&wait=10`).then(async (res) => ({ at: performance.now(), body: (await res.json()) as ChangesAnswer }));
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(t.app.services.notifier.waiting).toBe(1);
    const committing = performance.now();
    await put('k', 1);
    const { at, body } = await poll;
    expect(at - committing).toBeLessThan(100);
    expect(body).toMatchObject({ records: [{ offset: 1, key: 'k', value: 1 }], next: 1, head: 1 });
  });

  it('ignores commits of other prefixes and, when the wait ends, answers empty with next = head', async () => {
    await put('a/0', 0);
    const started = performance.now();
    const poll = changes('after=1&prefix=a/&wait=0.6');
    await new Promise((resolve) => setTimeout(resolve, 100));
    await put('b/1', 1);
    await put('b/2', 2);
    const { status, body } = await poll;
    expect(performance.now() - started).toBeGreaterThanOrEqual(590);
    expect(status).toBe(200);
    expect(body).toMatchObject({ records: [], next: 3, head: 3 });
  });

  it('answers at once when records are already there, whatever the wait', async () => {
    await put('k', 1);
    const started = performance.now();
    const { body } = await changes('after=0&wait=30');
    expect(performance.now() - started).toBeLessThan(1000);
    expect(offsets(body)).toEqual([1]);
  });

  it('stops waiting when the client goes away', async () => {
    // node:http rather than fetch: an aborted fetch leaves a spare connection open.
    const request = http.get(`${base}/v1/changes?wait=30`);
    request.on('error', () => {});
    await new Promise((resolve) => setTimeout(resolve, 150));
    expect(t.app.services.notifier.waiting).toBe(1);
    request.destroy();
    const deadline = Date.now() + 1000;
    while (t.app.services.notifier.waiting > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    expect(t.app.services.notifier.waiting).toBe(0);
  });
});

describe('410 answers', () => {
  it('offset_ahead when after is beyond the head', async () => {
    await put('k', 1);
    const { status, body } = await changes('after=2');
    expect(status).toBe(410);
    expect(body.error).toMatchObject({ code: 'offset_ahead', head: 1, message: expect.any(String) });
  });

  it('epoch_changed when the epoch given is not the log\'s', async () => {
    const epoch = t.app.services.store.epoch;
    expect((await changes(`epoch=${epoch}`)).status).toBe(200);
    const { status, body } = await changes('epoch=0123456789abcdef0123456789abcdef');
    expect(status).toBe(410);
    expect(body.error).toMatchObject({ code: 'epoch_changed', epoch });
  });

  it('offset_compacted, with the horizon, below the horizon', async () => {
    await writeBatch(base, [1, 2, 3, 4].map((i) => ({ key: `k${i}`, value: i })));
    // Moves the horizon as a compactor that removed the tombstone at 3 would.
    await t.database.setHorizon(3);

    for (const after of [0, 2]) {
      const { status, body } = await changes(`after=${after}`);
      expect(status).toBe(410);
      expect(body.error).toMatchObject({ code: 'offset_compacted', horizon: 3 });
    }
    const atHorizon = await changes('after=3');
    expect([atHorizon.status, offsets(atHorizon.body)]).toEqual([200, [4]]);
  });
});
