// HTTP details at the edges of the contract: conditional reads, request ids, shutdown,
// and bodies that must be refused rather than stored or failed on.
import { beforeEach, describe, expect, it } from 'vitest';
import { json, startApp, type TestApp } from './helpers.js';

let t: TestApp;
beforeEach(async () => {
  t = await startApp();
  return () => t.close();
});

describe('GET /v1/keys/{key} with If-None-Match', () => {
  it('answers 304 with the ETag and no body or Content-Length', async () => {
    await t.http.put('/v1/keys/a').set(json).send({ value: 'some text' });
    const res = await t.http.get('/v1/keys/a').set('if-none-match', '"1"');
    expect(res.status).toBe(304);
    expect(res.headers.etag).toBe('"1"');
    expect(res.headers['content-length']).toBeUndefined();
    expect(res.headers['content-type']).toBeUndefined();
    expect(res.text).toBe('');
  });
});
