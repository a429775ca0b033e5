import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { StatelogClient, StatelogError } from '../src/client/index.js';
import { startApp, type TestApp } from './helpers.js';
import { flakyProxy } from './support/flaky-proxy.js';

let t: TestApp;
let client: StatelogClient;
let url: string;
beforeEach(async () => {
  t = await startApp();
  const { port } = t.app.server.address() as { port: number };
  url = `http://127.0.0.1:${port}`;
  client = new StatelogClient({ url, retry: { baseDelayMs: 5 } });
});
afterEach(async () => {
  await t.close();
});

describe('StatelogClient', () => {
  it('puts, gets and deletes, with keys that need encoding', async () => {
    const key = 'users/é 1?#';
    expect(await client.put(key, { balance: 5 })).toEqual({ key, offset: 1 });
    expect(await client.get(key)).toMatchObject({ key, value: { balance: 5 }, offset: 1 });
    expect(await client.delete(key)).toEqual({ key, offset: 2 });
    expect(await client.get(key)).toBeNull();
  });

  it('makes conditional writes and throws typed errors', async () => {
    await client.put('k', 1);
    await client.put('k', 2, { ifMatch: 1 });
    const stale = await client.put('k', 3, { ifMatch: 1 }).catch((err: unknown) => err);
    expect(stale).toBeInstanceOf(StatelogError);
    expect(stale).toMatchObject({ status: 412, code: 'precondition_failed', details: { currentOffset: 2 } });
    await expect(client.put('k', 3, { ifNoneMatch: '*' })).rejects.toMatchObject({ code: 'precondition_failed' });
    await expect(client.delete('missing')).rejects.toMatchObject({ code: 'not_found' });
    await expect(client.put('', 1)).rejects.toMatchObject({ status: 400, code: 'invalid_key' });
  });

  it('batches atomically and increments', async () => {
    const result = await client.batch([
      { key: 'a', value: 1 },
      { key: 'n', op: 'incr', by: 2 },
    ]);
    expect(result.offset).toBe(2);
    expect(await client.incr('n', 3)).toBe(5);
    await expect(client.batch([{ key: 'b', value: 1 }, { key: 'a', op: 'incr', by: 1, ifOffset: 9 }])).rejects.toMatchObject({
      code: 'precondition_failed',
      details: { index: 1 },
    });
    expect(await client.get('b')).toBeNull();
  });

  it('lists every key across pages', async () => {
    await client.batch(Array.from({ length: 250 }, (_, i) => ({ key: `k${String(i).padStart(3, '0')}`, value: i })));
    const keys: string[] = [];
    for await (const entry of client.list({ prefix: 'k', pageSize: 60 })) keys.push(entry.key);
    expect(keys).toHaveLength(250);
    expect(keys[0]).toBe('k000');
    expect(keys[249]).toBe('k249');
  });

  it('retries a write whose answer was lost, and applies it once', async () => {
    const proxy = await flakyProxy(url, 2);
    try {
      const flaky = new StatelogClient({ url: proxy.url, retry: { baseDelayMs: 5 } });
      expect(await flaky.incr('counter', 10)).toBe(10);
      expect(proxy.cut).toBe(2);
      const put = await flaky.put('p', 'once');
      expect((await client.get('counter'))!.value).toBe(10);
      expect((await client.get('p'))!.offset).toBe(put.offset);
      expect(((await client.stats()) as { head: number }).head).toBe(2);
    } finally {
      await proxy.close();
    }
  });

  it('gives up after its retries and surfaces the connection error', async () => {
    const proxy = await flakyProxy(url, 100);
    try {
      const flaky = new StatelogClient({ url: proxy.url, retry: { retries: 2, baseDelayMs: 1 } });
      await expect(flaky.put('k', 1)).rejects.toThrow();
      expect(proxy.cut).toBe(3);
      // Three attempts with one idempotency key: written once.
      expect(((await client.stats()) as { head: number }).head).toBe(1);
    } finally {
      await proxy.close();
    }
  });
});
