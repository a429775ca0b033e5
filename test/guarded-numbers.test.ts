// Guarded increments: an incr item with min and/or max applies only if its result stays within
// them; otherwise 409 out_of_range with the key as it stands, and nothing of the batch is written.
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

describe('incr with min and max', () => {
  it('applies within the bounds, the bounds themselves included', async () => {
    await batch([{ key: 'balance', value: 10 }]);
    const down = await batch([{ key: 'balance', op: 'incr', by: -10, min: 0 }]);
    expect(down.status).toBe(200);
    expect(down.body.records[0]).toEqual({ key: 'balance', offset: 2, value: 0 });
    const up = await batch([{ key: 'balance', op: 'incr', by: 5, min: 0, max: 5 }]);
    expect(up.status).toBe(200);
    expect(up.body.records[0].value).toBe(5);
  });

  it('refuses a result below min with 409 out_of_range, the index and the key as it stands', async () => {
    await batch([{ key: 'a', value: 3 }, { key: 'b', value: 0 }]);
    const answer = await batch([
      { key: 'b', op: 'incr', by: 4 },
      { key: 'a', op: 'incr', by: -4, min: 0 },
    ]);
    expect(answer.status).toBe(409);
    expect(answer.body.error).toEqual({
      code: 'out_of_range',
      message: expect.any(String),
      index: 1,
      value: 3,
      offset: 1,
    });
    // Nothing of the batch: b's increment is undone too.
    expect(await value('b')).toBe(0);
    expect(await head()).toBe(2);
  });

  it('reports the committed value, not the one the batch had reached before the refused item', async () => {
    await batch([{ key: 'a', value: 3 }]);
    const answer = await batch([
      { key: 'a', op: 'incr', by: 5 },
      { key: 'a', op: 'incr', by: -10, min: 0 },
    ]);
    expect(answer.status).toBe(409);
    expect(answer.body.error).toMatchObject({ index: 1, value: 3, offset: 1 });
  });

  it('refuses a result above max; an absent key counts as 0 and is reported with offset null', async () => {
    const answer = await batch([{ key: 'fresh', op: 'incr', by: 11, max: 10 }]);
    expect(answer.status).toBe(409);
    expect(answer.body.error).toMatchObject({ code: 'out_of_range', index: 0, value: null, offset: null });
    expect((await t.http.get('/v1/keys/fresh')).status).toBe(404);
    expect(await head()).toBe(0);
  });

  it('makes a batch of guarded increments a transfer that never overdraws', async () => {
    await batch([{ key: 'acct/a', value: 100 }, { key: 'acct/b', value: 0 }]);
    const transfer = (by: number) =>
      batch([
        { key: 'acct/a', op: 'incr', by: -by, min: 0 },
        { key: 'acct/b', op: 'incr', by },
      ]);
    expect((await transfer(60)).status).toBe(200);
    const refused = await transfer(60);
    expect(refused.status).toBe(409);
    expect(refused.body.error).toMatchObject({ index: 0, value: 40, offset: 3 });
    expect([await value('acct/a'), await value('acct/b')]).toEqual([40, 60]);
  });

  it('is remembered with an Idempotency-Key like any refusal', async () => {
    await batch([{ key: 'a', value: 1 }]);
    const headers = { 'idempotency-key': 'draw-1' };
    const first = await batch([{ key: 'a', op: 'incr', by: -2, min: 0 }], headers);
    expect(first.status).toBe(409);
    await batch([{ key: 'a', value: 5 }]);
    const again = await batch([{ key: 'a', op: 'incr', by: -2, min: 0 }], headers);
    expect(again.status).toBe(409);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.body).toEqual(first.body);
  });

  it('refuses bad bounds with 400 before anything is attempted', async () => {
    const cases: [unknown, RegExp][] = [
      [{ key: 'k', op: 'incr', by: 1, min: 5, max: 4 }, /"min" is greater than "max"/],
      [{ key: 'k', op: 'incr', by: 1, min: '0' }, /min/],
      [{ key: 'k', op: 'incr', by: 1, max: null }, /max/],
      [{ key: 'k', value: 1, min: 0 }, /"min" and "max" belong to op "incr"/],
      [{ key: 'k', op: 'delete', max: 1 }, /"min" and "max" belong to op "incr"/],
    ];
    for (const [item, message] of cases) {
      const answer = await batch([{ key: 'other', value: 1 }, item]);
      expect(answer.status, JSON.stringify(item)).toBe(400);
      expect(answer.body.error.code).toBe('invalid_request');
      expect(answer.body.error.message).toMatch(message);
    }
    const inexact = await t.http
      .post('/v1/records')
      .set(json)
      .send('{"records":[{"key":"k","op":"incr","by":1,"min":1e400}]}');
    expect(inexact.status).toBe(400);
    expect(inexact.body.error.message).toMatch(/"min" is a number a double cannot hold exactly/);
    expect(await head()).toBe(0);
  });

  it('stays exact under contention: 50 concurrent decrements of a balance of 20 leave 0', async () => {
    await batch([{ key: 'balance', value: 20 }]);
    const answers = await Promise.all(
      Array.from({ length: 50 }, () => batch([{ key: 'balance', op: 'incr', by: -1, min: 0 }])),
    );
    const statuses = answers.map((answer) => answer.status);
    expect(statuses.filter((status) => status === 200)).toHaveLength(20);
    expect(statuses.filter((status) => status === 409)).toHaveLength(30);
    expect(answers.filter((a) => a.status === 200).map((a) => a.body.records[0].value).sort((x, y) => x - y)).toEqual(
      Array.from({ length: 20 }, (_, i) => i),
    );
    expect(await value('balance')).toBe(0);
  });
});
