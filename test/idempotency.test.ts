import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { json, startApp, type TestApp } from './support/helpers.js';

let t: TestApp;
beforeEach(async () => {
  t = await startApp();
});
afterEach(async () => {
  await t.close();
});

const head = async () => (await t.http.get('/v1/stats')).body.head as number;

describe('Idempotency-Key', () => {
  it('replays the first answer of a PUT and writes nothing more', async () => {
    const send = () => t.http.put('/v1/keys/k').set({ ...json, 'idempotency-key': 'pay-1' }).send({ value: 10 });
    const first = await send();
    expect(first.status).toBe(200);
    expect(first.headers['idempotent-replayed']).toBeUndefined();
    const again = await send();
    expect(again.status).toBe(200);
    expect(again.body).toEqual(first.body);
    expect(again.headers.etag).toBe(first.headers.etag);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(await head()).toBe(1);
  });

  it('replays batches with incr, so a retried increment is applied once', async () => {
    const send = () =>
      t.http
        .post('/v1/records')
        .set({ ...json, 'idempotency-key': 'incr-1' })
        .send({ records: [{ key: 'n', op: 'incr', by: 5 }] });
    await send();
    await send();
    const third = await send();
    expect(third.headers['idempotent-replayed']).toBe('true');
    expect(third.body.records[0].value).toBe(5);
    expect((await t.http.get('/v1/keys/n')).body.value).toBe(5);
  });

  it('replays a refusal as it was first answered', async () => {
    await t.http.put('/v1/keys/k').set(json).send({ value: 1 });
    const send = () => t.http.delete('/v1/keys/k').set({ 'idempotency-key': 'del-1', 'if-match': '"9"' });
    const first = await send();
    expect(first.status).toBe(412);
    const again = await send();
    expect(again.status).toBe(412);
    expect(again.body).toEqual(first.body);
    expect(again.headers['idempotent-replayed']).toBe('true');
  });

  it('refuses the same key with a different request: 422 idempotency_key_reused', async () => {
    await t.http.put('/v1/keys/k').set({ ...json, 'idempotency-key': 'same' }).send({ value: 1 });
    const otherBody = await t.http.put('/v1/keys/k').set({ ...json, 'idempotency-key': 'same' }).send({ value: 2 });
    expect(otherBody.status).toBe(422);
    expect(otherBody.body.error.code).toBe('idempotency_key_reused');
    const otherPath = await t.http.put('/v1/keys/j').set({ ...json, 'idempotency-key': 'same' }).send({ value: 1 });
    expect(otherPath.status).toBe(422);
    const otherMethod = await t.http.delete('/v1/keys/k').set({ 'idempotency-key': 'same' });
    expect(otherMethod.status).toBe(422);
    expect(await head()).toBe(1);
  });

  it('treats concurrent retries in one group commit as one write', async () => {
    const answers = await Promise.all(
      Array.from({ length: 10 }, () =>
        t.http.post('/v1/records').set({ ...json, 'idempotency-key': 'burst' }).send({ records: [{ key: 'n', op: 'incr', by: 1 }] }),
      ),
    );
    expect(answers.every((a) => a.status === 200)).toBe(true);
    expect(answers.filter((a) => a.headers['idempotent-replayed'] === 'true')).toHaveLength(9);
    expect((await t.http.get('/v1/keys/n')).body.value).toBe(1);
  });

  it('refuses a malformed key with 400', async () => {
    for (const key of ['', 'x'.repeat(256), 'has space', 'tab\there', 'é']) {
      const answer = await t.http.put('/v1/keys/k').set({ ...json, 'idempotency-key': key }).send({ value: 1 });
      expect(answer.status, key).toBe(400);
      expect(answer.body.error.code).toBe('invalid_request');
    }
    expect(await head()).toBe(0);
  });
});

describe('Idempotency-Key expiry', () => {
  it('forgets a key after STATELOG_IDEMPOTENCY_TTL_MS', async () => {
    await t.close();
    t = await startApp({ STATELOG_IDEMPOTENCY_TTL_MS: '50' });
    const send = () => t.http.put('/v1/keys/k').set({ ...json, 'idempotency-key': 'short' }).send({ value: 1 });
    await send();
    await new Promise((resolve) => setTimeout(resolve, 80));
    const later = await send();
    expect(later.headers['idempotent-replayed']).toBeUndefined();
    expect(later.body.offset).toBe(2);
    // The background purge (every 50 ms here) removes expired keys from the table: once
    // the second answer has expired too, nothing is left for an explicit purge.
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(await t.app.services.store.purgeIdempotency(Date.now() + 1000)).toBe(0);
  });
});

describe('Idempotency-Key fingerprint', () => {
  it('treats two encodings of the same key as the same path', async () => {
    const upper = await t.http.put('/v1/keys/a%2Fb').set({ ...json, 'idempotency-key': 'enc' }).send({ value: 1 });
    const lower = await t.http.put('/v1/keys/a%2fb').set({ ...json, 'idempotency-key': 'enc' }).send({ value: 1 });
    expect(lower.status).toBe(200);
    expect(lower.headers['idempotent-replayed']).toBe('true');
    expect(lower.body).toEqual(upper.body);
  });
});
