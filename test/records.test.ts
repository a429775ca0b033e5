import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { json, startApp, type TestApp } from './support/helpers.js';

let t: TestApp;
beforeEach(async () => {
  t = await startApp();
});
afterEach(async () => {
  await t.close();
});

const batch = (records: unknown[], headers: Record<string, string> = {}) =>
  t.http.post('/v1/records').set({ ...json, ...headers }).send({ records });
const value = async (key: string) => (await t.http.get(`/v1/keys/${encodeURIComponent(key)}`)).body.value;
const head = async () => (await t.http.get('/v1/stats')).body.head as number;

describe('POST /v1/records', () => {
  it('applies sets and deletes in order with consecutive offsets', async () => {
    await t.http.put('/v1/keys/old').set(json).send({ value: 1 });
    const answer = await batch([
      { key: 'a', value: 1 },
      { key: 'b', value: { x: true } },
      { key: 'old', op: 'delete' },
      { key: 'a', op: 'set', value: 2 },
    ]);
    expect(answer.status).toBe(200);
    expect(answer.body).toEqual({
      records: [
        { key: 'a', offset: 2 },
        { key: 'b', offset: 3 },
        { key: 'old', offset: 4 },
        { key: 'a', offset: 5 },
      ],
      offset: 5,
    });
    expect(await value('a')).toBe(2);
    expect((await t.http.get('/v1/keys/old')).status).toBe(404);
  });

  it('lets a later item see an earlier one', async () => {
    const answer = await batch([
      { key: 'k', value: 1, ifAbsent: true },
      { key: 'k', value: 2, ifOffset: 1 },
      { key: 'k', op: 'incr', by: 10 },
      { key: 'k', op: 'delete', ifOffset: 3 },
      { key: 'k', value: 'back', ifAbsent: true },
    ]);
    expect(answer.status).toBe(200);
    expect(answer.body.records[2]).toEqual({ key: 'k', offset: 3, value: 12 });
    expect(await value('k')).toBe('back');
  });

  it('is all or nothing: a failed condition writes nothing and names the index', async () => {
    await batch([{ key: 'k', value: 1 }]);
    const answer = await batch([
      { key: 'x', value: 1 },
      { key: 'y', value: 2 },
      { key: 'k', value: 3, ifOffset: 99 },
    ]);
    expect(answer.status).toBe(412);
    expect(answer.body.error).toMatchObject({ code: 'precondition_failed', index: 2, currentOffset: 1 });
    expect(await head()).toBe(1);
    expect((await t.http.get('/v1/keys/x')).status).toBe(404);
  });

  it('refuses ifAbsent on a live key and a delete of a missing key, with the index', async () => {
    await batch([{ key: 'k', value: 1 }]);
    const absent = await batch([{ key: 'n', value: 1 }, { key: 'k', value: 2, ifAbsent: true }]);
    expect(absent.status).toBe(412);
    expect(absent.body.error).toMatchObject({ code: 'precondition_failed', index: 1 });
    const missing = await batch([{ key: 'n', value: 1 }, { key: 'nope', op: 'delete' }]);
    expect(missing.status).toBe(404);
    expect(missing.body.error).toMatchObject({ code: 'not_found', index: 1 });
    expect(await head()).toBe(1);
  });

  it('accepts 1000 items and refuses 0 or 1001', async () => {
    const items = Array.from({ length: 1000 }, (_, i) => ({ key: `k${i}`, value: i }));
    const full = await batch(items);
    expect(full.status).toBe(200);
    expect(full.body.offset).toBe(1000);
    expect((await batch([])).status).toBe(400);
    expect((await batch([...items, { key: 'x', value: 1 }])).status).toBe(400);
    expect(await head()).toBe(1000);
  });

  it('logs every record of a long batch as sent, superseded ones and delete markers included', async () => {
    // 75 records: the store inserts log rows in runs, then one by one; each row must keep its own fields.
    await batch(Array.from({ length: 5 }, (_, i) => ({ key: `d${i}`, value: i })));
    const items = Array.from({ length: 75 }, (_, i) =>
      i % 15 === 14 ? { key: `d${(i - 14) / 15}`, op: 'delete' } : { key: `k${i % 20}`, value: { i, text: `v${i}` } },
    );
    const answer = await batch(items);
    expect(answer.status).toBe(200);
    expect(answer.body.offset).toBe(80);
    const feed = (await t.http.get('/v1/changes?after=5&limit=100')).body as { records: { offset: number; key: string; op: string; value?: unknown }[] };
    expect(feed.records.map(({ offset, key, op, value }) => ({ offset, key, op, ...(value === undefined ? {} : { value }) }))).toEqual(
      items.map((item, i) => ({ offset: 6 + i, key: item.key, op: item.op ?? 'set', ...('value' in item ? { value: item.value } : {}) })),
    );
    const last = new Map(items.map((item) => [item.key, 'value' in item ? item.value : undefined]));
    for (const [key, expected] of last) expect(await value(key)).toEqual(expected);
  });

  it('refuses malformed items with the index', async () => {
    const cases: [unknown, string][] = [
      [{ key: 'k' }, 'invalid_request'],
      [{ key: 'k', op: 'delete', value: 1 }, 'invalid_request'],
      [{ key: 'k', op: 'incr' }, 'invalid_request'],
      [{ key: 'k', op: 'incr', by: 1, value: 1 }, 'invalid_request'],
      [{ key: 'k', value: 1, by: 2 }, 'invalid_request'],
      [{ key: 'k', value: 1, ifOffset: 1, ifAbsent: true }, 'invalid_request'],
      [{ key: '', value: 1 }, 'invalid_key'],
      [{ key: 'a\u0001b', value: 1 }, 'invalid_key'],
    ];
    for (const [item, code] of cases) {
      const answer = await batch([{ key: 'fine', value: 0 }, item]);
      expect(answer.status, JSON.stringify(item)).toBe(400);
      expect(answer.body.error.code, JSON.stringify(item)).toBe(code);
      expect(answer.body.error.index, JSON.stringify(item)).toBe(1);
    }
    expect(await head()).toBe(0);
  });
});

describe('incr', () => {
  it('counts an absent key as 0 and answers the new value', async () => {
    const answer = await batch([{ key: 'n', op: 'incr', by: 5 }]);
    expect(answer.body.records).toEqual([{ key: 'n', offset: 1, value: 5 }]);
    const again = await batch([{ key: 'n', op: 'incr', by: -7.5 }]);
    expect(again.body.records[0].value).toBe(-2.5);
    expect(await value('n')).toBe(-2.5);
  });

  it('refuses a non-number value or an out-of-range result with 422 and the index', async () => {
    await batch([
      { key: 's', value: 'text' },
      { key: 'big', value: Number.MAX_SAFE_INTEGER - 1 },
    ]);
    const notNumber = await batch([{ key: 'x', value: 1 }, { key: 's', op: 'incr', by: 1 }]);
    expect(notNumber.status).toBe(422);
    expect(notNumber.body.error).toMatchObject({ code: 'not_a_number', index: 1 });
    expect((await batch([{ key: 'big', op: 'incr', by: 1 }])).status).toBe(200);
    const tooBig = await batch([{ key: 'big', op: 'incr', by: 1 }]);
    expect(tooBig.status).toBe(422);
    expect(tooBig.body.error.code).toBe('not_a_number');
    expect(await value('big')).toBe(Number.MAX_SAFE_INTEGER);
    expect(await head()).toBe(3);
  });

  it('loses no update under 100 concurrent increments', async () => {
    await batch([{ key: 'counter', value: 1000 }]);
    const answers = await Promise.all(
      Array.from({ length: 100 }, () => batch([{ key: 'counter', op: 'incr', by: 1 }])),
    );
    expect(answers.every((a) => a.status === 200)).toBe(true);
    expect(await value('counter')).toBe(1100);
    const results = answers.map((a) => a.body.records[0].value).sort((a: number, b: number) => a - b);
    expect(results).toEqual(Array.from({ length: 100 }, (_, i) => 1001 + i));
  });
});
