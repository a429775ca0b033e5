import { getEventListeners } from 'node:events';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CutStreamError, StatelogClient, StatelogError } from '@statelog/client';
import { startApp, type TestApp } from './support/helpers.js';
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

  it('increments within bounds, and throws out_of_range with the key as it stands past them', async () => {
    expect(await client.incr('balance', 5, { min: 0, max: 5 })).toBe(5);
    await expect(client.incr('balance', -6, { min: 0 })).rejects.toMatchObject({
      status: 409,
      code: 'out_of_range',
      details: { index: 0, value: 5, offset: 1 },
    });
    await expect(client.incr('balance', 1, { max: 5 })).rejects.toMatchObject({ code: 'out_of_range' });
    await expect(
      client.batch([
        { key: 'other', op: 'incr', by: 6 },
        { key: 'balance', op: 'incr', by: -6, min: 0 },
      ]),
    ).rejects.toMatchObject({ code: 'out_of_range', details: { index: 1 } });
    expect(await client.get('other')).toBeNull();
    expect((await client.get('balance'))?.value).toBe(5);
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

  it('leaves no listener on a signal shared by calls that have ended', async () => {
    // A service passes one shutdown signal to every call: each call's timeout is linked to
    // it, and the link must go when the call ends, not when its timeout would have fired.
    const shutdown = new AbortController();
    const { signal } = shutdown;
    for (let i = 0; i < 12; i++) await client.put(`k${i}`, i, { signal });
    for (let i = 0; i < 12; i++) expect((await client.get(`k${i}`, { signal }))!.value).toBe(i);
    expect(await client.get('missing', { signal })).toBeNull();
    await expect(client.put('', 1, { signal })).rejects.toMatchObject({ code: 'invalid_key' });
    expect(getEventListeners(signal, 'abort')).toHaveLength(0);
    // The link still carries an abort while a call is under way.
    const pending = client.put('late', 1, { signal });
    expect(getEventListeners(signal, 'abort').length).toBeGreaterThan(0);
    shutdown.abort(new Error('shutting down'));
    await expect(pending).rejects.toThrow('shutting down');
    expect(getEventListeners(signal, 'abort')).toHaveLength(0);
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

describe('StatelogClient streams', () => {
  it('iterates a snapshot with its offset, and long-polls changes after it', async () => {
    await client.batch(Array.from({ length: 30 }, (_, i) => ({ key: `s${String(i).padStart(2, '0')}`, value: i })));
    const snapshot = await client.snapshot({ prefix: 's1' });
    const keys: string[] = [];
    for await (const entry of snapshot) keys.push(entry.key);
    expect(keys).toEqual(Array.from({ length: 10 }, (_, i) => `s1${i}`));
    expect(snapshot).toMatchObject({ offset: 30, count: 10 });

    const seen: { key: string; op: string }[] = [];
    const abort = new AbortController();
    const follow = (async () => {
      try {
        for await (const record of client.changes({ after: snapshot.offset, prefix: 's1', signal: abort.signal })) {
          seen.push({ key: record.key, op: record.op });
          if (seen.length === 2) abort.abort();
        }
      } catch (err) {
        if (!abort.signal.aborted) throw err;
      }
    })();
    await client.put('s0x', 'not in the prefix');
    await client.put('s1x', 1);
    await client.delete('s10');
    await follow;
    expect(seen).toEqual([
      { key: 's1x', op: 'set' },
      { key: 's10', op: 'delete' },
    ]);
  });

  it('follows each page\'s Link, so followers at one position ask one URL, and takes a snapshot with minOffset', async () => {
    await client.batch(Array.from({ length: 5 }, (_, i) => ({ key: `l/${i}`, value: i })));
    const snapshot = await client.snapshot({ prefix: 'l/', minOffset: 3 });
    expect(snapshot.offset).toBeGreaterThanOrEqual(5);
    for await (const entry of snapshot) void entry;
    const first = await client.changesPage({ after: 0, prefix: 'l/', limit: 2 });
    expect(first.link).toBe(`/v1/changes?after=2&epoch=${first.epoch}&limit=2&prefix=l%2F`);
    const asked: string[] = [];
    t.app.server.on('request', (req: { url: string }) => asked.push(req.url));
    const abort = new AbortController();
    const offsets: number[] = [];
    try {
      for await (const record of client.changes({ after: 0, prefix: 'l/', limit: 2, signal: abort.signal })) {
        offsets.push(record.offset);
        if (offsets.length === 5) abort.abort();
      }
    } catch (err) {
      if (!abort.signal.aborted) throw err;
    }
    expect(offsets).toEqual([1, 2, 3, 4, 5]);
    expect(asked.slice(1, 3)).toEqual([`${first.link!}&wait=30`, `/v1/changes?after=4&epoch=${first.epoch}&limit=2&prefix=l%2F&wait=30`]);
  });

  it('throws CutStreamError when a snapshot ends without its last line', async () => {
    const big = 'x'.repeat(2000);
    for (let i = 0; i < 10; i++) {
      await client.batch(Array.from({ length: 500 }, (_, j) => ({ key: `big/${i}/${j}`, value: big })));
    }
    const snapshot = await client.snapshot();
    let read = 0;
    const reading = (async () => {
      for await (const entry of snapshot) {
        read++;
        // Shutdown cuts the stream short while the reader is in the middle of it.
        if (read === 10) void t.app.close();
        void entry;
        await new Promise((resolve) => setTimeout(resolve, 1));
      }
    })();
    await expect(reading).rejects.toThrow(CutStreamError);
    expect(read).toBeLessThan(5000);
  });

  it('raises 410 from changes() as an error that asks for a new snapshot', async () => {
    const error = await client.changesPage({ after: 99 }).catch((err: unknown) => err);
    expect(error).toBeInstanceOf(StatelogError);
    expect(error).toMatchObject({ status: 410, code: 'offset_ahead', mustResnapshot: true });
  });
});
