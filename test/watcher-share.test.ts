// STATELOG_MAX_WATCHERS shared fairly: one client (its address, and its token when tokens
// are set) holds at most three quarters of the slots, so another still gets one. Real
// long polls over loopback addresses of their own (127.0.0.2, ...), as separate hosts.
import http from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { json, startApp, type TestApp } from './support/helpers.js';
import { portOf } from './support/http.js';

let t: TestApp | undefined;
const requests: http.ClientRequest[] = [];
afterEach(async () => {
  for (const request of requests.splice(0)) request.destroy();
  await t?.close();
  t = undefined;
});

interface Answer {
  status: number;
  body: { error?: { code: string; message: string; limit?: number } };
}

/** A long poll at the head from `address`, with `token`: resolves with its answer. */
function poll(address: string, token?: string, forwardedFor?: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const head = t!.app.services.store.position().head;
    const request = http.get(
      {
        host: '127.0.0.1',
        port: portOf(t!.app.server),
        path: `/v1/changes?after=${head}&wait=20`,
        localAddress: address,
        agent: false,
        headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), ...(forwardedFor ? { 'x-forwarded-for': forwardedFor } : {}) },
      },
      (response) => {
        let text = '';
        response.setEncoding('utf8');
        response.on('data', (chunk: string) => (text += chunk));
        response.on('end', () => resolve({ status: response.statusCode!, body: JSON.parse(text) as Answer['body'] }));
      },
    );
    request.on('error', reject);
    requests.push(request);
  });
}

/** Waits until `count` slots are held. */
async function held(count: number): Promise<void> {
  const deadline = Date.now() + 5_000;
  while (t!.app.services.watchers.inUse !== count) {
    if (Date.now() > deadline) throw new Error(`${t!.app.services.watchers.inUse} slots held, not ${count}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

const refusedForShare = (share: number) => ({
  status: 429,
  body: { error: { code: 'too_many_requests', limit: share, message: expect.stringMatching(/its share of STATELOG_MAX_WATCHERS/) } },
});

describe('watcher slots shared by client', () => {
  it('an address holds at most three quarters of them: another address still gets a slot', async () => {
    t = await startApp({ STATELOG_MAX_WATCHERS: '4', STATELOG_SYNC: 'normal' });
    const waiting = [poll('127.0.0.1'), poll('127.0.0.1'), poll('127.0.0.1')];
    await held(3);
    expect(await poll('127.0.0.1')).toMatchObject(refusedForShare(3));
    const other = poll('127.0.0.2');
    await held(4);
    await t.http.put('/v1/keys/wake').set(json).send({ value: 1 }).expect(200);
    for (const answer of [...waiting, other]) expect((await answer).status).toBe(200);
    await held(0);
  });

  it('a token holds at most three quarters of them, whatever addresses it comes from', async () => {
    t = await startApp({ STATELOG_MAX_WATCHERS: '8', STATELOG_SYNC: 'normal', STATELOG_TOKENS: 'read:greedy-token,read:other-token,write:writer' });
    const waiting = ['127.0.0.1', '127.0.0.1', '127.0.0.1', '127.0.0.2', '127.0.0.2', '127.0.0.2'].map((address) => poll(address, 'greedy-token'));
    await held(6);
    expect(await poll('127.0.0.3', 'greedy-token')).toMatchObject(refusedForShare(6));
    const other = poll('127.0.0.3', 'other-token');
    await held(7);
    await t.http.put('/v1/keys/wake').set({ ...json, authorization: 'Bearer writer' }).send({ value: 1 }).expect(200);
    for (const answer of [...waiting, other]) expect((await answer).status).toBe(200);
  });

  it('a token is counted by its token alone: behind one address, another token still gets its slots', async () => {
    t = await startApp({ STATELOG_MAX_WATCHERS: '8', STATELOG_SYNC: 'normal', STATELOG_TOKENS: 'read:greedy-token,read:other-token,write:writer' });
    const waiting = Array.from({ length: 6 }, () => poll('127.0.0.1', 'greedy-token'));
    await held(6);
    expect(await poll('127.0.0.1', 'greedy-token')).toMatchObject(refusedForShare(6));
    const others = [poll('127.0.0.1', 'other-token'), poll('127.0.0.1', 'other-token')];
    await held(8);
    await t.http.put('/v1/keys/wake').set({ ...json, authorization: 'Bearer writer' }).send({ value: 1 }).expect(200);
    for (const answer of [...waiting, ...others]) expect((await answer).status).toBe(200);
  });

  it('a made-up bearer header with auth off is no share of its own: the address counts', async () => {
    t = await startApp({ STATELOG_MAX_WATCHERS: '4', STATELOG_SYNC: 'normal' });
    const waiting = ['a', 'b', 'c'].map((token) => poll('127.0.0.1', token));
    await held(3);
    expect(await poll('127.0.0.1', 'd')).toMatchObject(refusedForShare(3));
    await t.http.put('/v1/keys/wake').set(json).send({ value: 1 }).expect(200);
    for (const answer of waiting) expect((await answer).status).toBe(200);
  });

  it('behind a trusted proxy, the forwarded address counts; from anyone else, the header is ignored', async () => {
    t = await startApp({ STATELOG_MAX_WATCHERS: '4', STATELOG_SYNC: 'normal', STATELOG_TRUSTED_PROXIES: '127.0.0.1' });
    const waiting = [poll('127.0.0.1', undefined, '192.0.2.1'), poll('127.0.0.1', undefined, '192.0.2.1'), poll('127.0.0.1', undefined, '192.0.2.1')];
    await held(3);
    expect(await poll('127.0.0.1', undefined, '192.0.2.1')).toMatchObject(refusedForShare(3));
    // Another client behind the same proxy.
    const other = poll('127.0.0.1', undefined, '192.0.2.2');
    await held(4);
    await t.http.put('/v1/keys/wake').set(json).send({ value: 1 }).expect(200);
    for (const answer of [...waiting, other]) expect((await answer).status).toBe(200);
    await held(0);
    // 127.0.0.2 is no trusted proxy: what it forwards names nobody, its own address counts.
    const direct = [1, 2, 3].map((n) => poll('127.0.0.2', undefined, `192.0.2.${10 + n}`));
    await held(3);
    expect(await poll('127.0.0.2', undefined, '192.0.2.99')).toMatchObject(refusedForShare(3));
    await t.http.put('/v1/keys/wake').set(json).send({ value: 2 }).expect(200);
    for (const answer of direct) expect((await answer).status).toBe(200);
  });
});
