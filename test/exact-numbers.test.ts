// Values come back as written: the digits of every JSON number survive PUT, batches, GET,
// listing, snapshot, changes and the stream. Checked on the raw text of each answer
// (JSON.parse would round the very digits under test).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApp, type TestApp } from './support/helpers.js';
import { baseUrl, SseClient } from './support/stream-clients.js';

/** Numbers JSON.parse changes, and texts JSON.stringify would write differently. */
const EXACT = '{"n":12345678901234567890,"m":[9007199254740993,1.0000000000000000001,-12345678901234567890123,1.0,-0,1e2,2.50],"s":"9007199254740993"}';
const BARE = '9007199254740993';

let t: TestApp;
let base: string;
beforeAll(async () => {
  t = await startApp({ STATELOG_SYNC: 'normal' });
  base = baseUrl(t.app);
});
afterAll(async () => {
  await t.close();
});

async function send(method: string, path: string, body: string, headers: Record<string, string> = {}) {
  const res = await fetch(`${base}${path}`, { method, headers: { 'content-type': 'application/json', ...headers }, body });
  return { status: res.status, text: await res.text(), headers: res.headers };
}

async function text(path: string): Promise<string> {
  const res = await fetch(`${base}${path}`);
  expect(res.status).toBe(200);
  return res.text();
}

describe('numbers as written', () => {
  it('through PUT and a batch, back from GET, listing, snapshot and changes', async () => {
    expect((await send('PUT', '/v1/keys/exact%2Fput', `{"value": ${EXACT}}`)).status).toBe(200);
    expect((await send('PUT', '/v1/keys/exact%2Fbare', `{"value":${BARE}}`)).status).toBe(200);
    const batch = `{"records":[{"key":"exact/batch","value":${EXACT}},{"key":"exact/big","value":12345678901234567890}]}`;
    expect((await send('POST', '/v1/records', batch)).status).toBe(200);

    expect(await text('/v1/keys/exact%2Fput')).toContain(`"value":${EXACT},`);
    expect(await text('/v1/keys/exact%2Fbare')).toContain(`"value":${BARE},`);
    expect(await text('/v1/keys/exact%2Fbig')).toContain('"value":12345678901234567890,');
    const listing = await text('/v1/keys?prefix=exact/');
    for (const key of ['put', 'batch']) expect(listing).toContain(`"key":"exact/${key}","value":${EXACT},`);
    const snapshot = await text('/v1/snapshot?prefix=exact/');
    expect(snapshot).toContain(`"key":"exact/batch","value":${EXACT},`);
    expect(snapshot).toContain(`"key":"exact/bare","value":${BARE},`);
    const changes = await text('/v1/changes?prefix=exact/');
    expect(changes).toContain(`"key":"exact/put","op":"set","value":${EXACT},`);
    expect(changes).toContain('"key":"exact/big","op":"set","value":12345678901234567890,');
  });

  it('through the event stream, snapshot and live records', async () => {
    const stream = await SseClient.connect(`${base}/v1/changes/stream?prefix=exact/&snapshot=true`);
    await stream.until((events) => events.some((e) => e.event === 'snapshot-end'));
    expect(stream.named('record').map((e) => e.data).join('\n')).toContain(`"value":${EXACT},`);
    expect((await send('PUT', '/v1/keys/exact%2Flive', '{"value":[1.0000000000000000001]}')).status).toBe(200);
    await stream.until((events) => events.some((e) => e.data.includes('"exact/live"')));
    expect(stream.named('record').find((e) => e.data.includes('"exact/live"'))!.data).toContain('"value":[1.0000000000000000001],');
    stream.request.destroy();
  });

  it('leaves plain values as JSON.stringify writes them', async () => {
    expect((await send('PUT', '/v1/keys/plain', '{ "value" : { "a" : [ 1, 2.5, "1.0" ] , "b":"\\u0041" } }')).status).toBe(200);
    expect(await text('/v1/keys/plain')).toContain('"value":{"a":[1,2.5,"1.0"],"b":"A"},');
  });

  it('incr keeps its ±(2^53 - 1) rule: a stored number a double cannot hold is not_a_number', async () => {
    expect((await send('PUT', '/v1/keys/counter', `{"value":${BARE}}`)).status).toBe(200);
    const incr = await send('POST', '/v1/records', '{"records":[{"key":"counter","op":"incr","by":1}]}');
    expect(incr.status).toBe(422);
    expect(JSON.parse(incr.text)).toMatchObject({ error: { code: 'not_a_number' } });
    expect((await send('PUT', '/v1/keys/counter', '{"value":1.0000000000000000001}')).status).toBe(200);
    expect((await send('POST', '/v1/records', '{"records":[{"key":"counter","op":"incr","by":1}]}')).status).toBe(422);
    expect(await text('/v1/keys/counter')).toContain('"value":1.0000000000000000001,');
    // An increment that a double would change is refused, not rounded.
    const by = await send('POST', '/v1/records', '{"records":[{"key":"c2","op":"incr","by":1.0000000000000000001}]}');
    expect(by.status).toBe(400);
    expect(JSON.parse(by.text)).toMatchObject({ error: { code: 'invalid_request' } });
  });

  it('keeps refusing a number beyond the range of a double, and a repeated member beside an exact number', async () => {
    const huge = await send('PUT', '/v1/keys/huge', '{"value":[1e400, 12345678901234567890]}');
    expect(huge.status).toBe(400);
    const twice = await send('PUT', '/v1/keys/twice', '{"value":{"a":12345678901234567890,"a":1}}');
    expect(twice.status).toBe(400);
    expect(JSON.parse(twice.text)).toMatchObject({ error: { code: 'invalid_json' } });
  });

  it('idempotency fingerprints tell apart bodies that differ only in digits a double cannot hold', async () => {
    const key = { 'idempotency-key': 'exact-1' };
    const first = await send('PUT', '/v1/keys/idem', '{"value":12345678901234567890}', key);
    expect(first.status).toBe(200);
    const same = await send('PUT', '/v1/keys/idem', '{"value":12345678901234567890}', key);
    expect([same.status, same.headers.get('idempotent-replayed')]).toEqual([200, 'true']);
    const other = await send('PUT', '/v1/keys/idem', '{"value":12345678901234567891}', key);
    expect(other.status).toBe(422);
    expect(JSON.parse(other.text)).toMatchObject({ error: { code: 'idempotency_key_reused' } });
    const rounded = await send('PUT', '/v1/keys/idem', '{"value":12345678901234567000}', key);
    expect(rounded.status).toBe(422);
  });

  it('refuses with 413 a body over 128 KiB that holds a number kept as written; the same body with plain numbers is taken', async () => {
    const items = (number: string) => Array.from({ length: 200 }, (_, i) => `{"key":"n/${i}","value":[${Array(170).fill(number).join(',')}]}`);
    const heavy = `{"records":[${items('1.0').join(',')}]}`;
    expect(heavy.length).toBeGreaterThan(128 * 1024);
    const refused = await send('POST', '/v1/records', heavy);
    expect(refused.status).toBe(413);
    expect(JSON.parse(refused.text)).toMatchObject({
      error: { code: 'payload_too_large', limit: 131072, message: expect.stringMatching(/number kept as written .* may be at most 131072/) },
    });
    expect((await fetch(`${base}/v1/keys/n%2F0`)).status).toBe(404);
    expect((await send('POST', '/v1/records', `{"records":[${items('1').join(',')}]}`)).status).toBe(200);
    // Below the bound, digits are kept as ever.
    expect((await send('POST', '/v1/records', `{"records":[${items('1.0').slice(0, 50).join(',')}]}`)).status).toBe(200);
    expect(await text('/v1/keys/n%2F0')).toContain('"value":[1.0,1.0,');
  });
});
