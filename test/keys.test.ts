import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { json, startApp, type TestApp } from './helpers.js';

let t: TestApp;
beforeEach(async () => {
  t = await startApp();
});
afterEach(async () => {
  await t.close();
});

describe('PUT and GET /v1/keys/{key}', () => {
  it('writes a value and reads it back with its offset as ETag', async () => {
    const put = await t.http.put('/v1/keys/user_1').set(json).send({ value: { balance: 150 } });
    expect(put.status).toBe(200);
    expect(put.body).toEqual({ key: 'user_1', offset: 1 });
    expect(put.headers.etag).toBe('"1"');

    const get = await t.http.get('/v1/keys/user_1');
    expect(get.status).toBe(200);
    expect(get.body).toMatchObject({ key: 'user_1', value: { balance: 150 }, offset: 1 });
    expect(get.headers.etag).toBe('"1"');
  });
});
