// The state digest: after random writes, deletes, incr, TTL expiries and compactions the
// server's digest (/v1/stats, the snapshot trailer) is the one computed from its
// snapshot, and a StateMirror that followed keeps the same; a mirror fed a wrong record
// (through a proxy that rewrites the stream) reports both digests.
import { createServer, type Server } from 'node:http';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { DigestMismatchError, StateMirror } from '@statelog/client';
import { digestHex, digestOf } from '../src/contract/digest.js';
import { json, startApp, type TestApp } from './support/helpers.js';

let t: TestApp | undefined;
let mirrors: StateMirror[] = [];
let proxy: Server | undefined;
afterEach(async () => {
  for (const mirror of mirrors) await mirror.close();
  mirrors = [];
  await new Promise((resolve) => (proxy ? proxy.close(resolve) : resolve(undefined)));
  proxy = undefined;
  await t?.close();
  t = undefined;
});

const urlOf = (app: TestApp) => `http://127.0.0.1:${(app.app.server.address() as { port: number }).port}`;

function mirrorOf(url: string, options: { checkpoint?: string } = {}): StateMirror {
  const mirror = new StateMirror({ url, retry: { baseDelayMs: 10, maxDelayMs: 100 }, warn: () => {}, ...options });
  mirrors.push(mirror);
  return mirror;
}

/** The snapshot's entries and trailer, and the stats, as the server gives them now. */
async function serverDigests(app: TestApp) {
  const lines = (await app.http.get('/v1/snapshot')).text.trim().split('\n').map((line) => JSON.parse(line));
  const trailer = lines.pop() as { offset: number; digest: string };
  const stats = (await app.http.get('/v1/stats')).body as { digest: string; digestOffset: number; head: number };
  return { computed: digestHex(digestOf(lines as { key: string; offset: number }[])), trailer, stats };
}

const KEYS = ['a', 'b', 'c', 'd/1', 'd/2', 'é'];
const key = fc.constantFrom(...KEYS);
const item = fc.oneof(
  fc.record({ key, value: fc.integer({ min: -5, max: 5 }) }),
  fc.record({ key, value: fc.integer(), ttlMs: fc.integer({ min: 1, max: 3 }) }),
  fc.record({ key, op: fc.constant('delete') }),
  fc.record({ key, op: fc.constant('incr'), by: fc.integer({ min: -3, max: 3 }) }),
);
const action = fc.oneof(
  { weight: 5, arbitrary: fc.record({ type: fc.constant('write' as const), items: fc.array(item, { minLength: 1, maxLength: 4 }) }) },
  { weight: 1, arbitrary: fc.record({ type: fc.constant('expire' as const) }) },
  { weight: 1, arbitrary: fc.record({ type: fc.constant('compact' as const) }) },
);

describe('the state digest', () => {
  it("equals the digest of the server's snapshot, and a following mirror's, after random writes, expiries and compactions", async () => {
    t = await startApp({ STATELOG_EXPIRY_INTERVAL_MS: '0', STATELOG_TOMBSTONE_RETENTION_MS: '0', STATELOG_SYNC: 'normal' });
    const app = t;
    const mirror = mirrorOf(urlOf(app));
    const errors: unknown[] = [];
    mirror.on('error', (err) => errors.push(err));
    await mirror.ready;
    await fc.assert(
      fc.asyncProperty(fc.array(action, { minLength: 1, maxLength: 12 }), async (actions) => {
        for (const step of actions) {
          if (step.type === 'write') {
            const res = await app.http.post('/v1/records').set(json).send({ records: step.items });
            expect([200, 404, 412, 422]).toContain(res.status);
          } else if (step.type === 'expire') {
            await new Promise((resolve) => setTimeout(resolve, 5));
            await app.app.services.expirer.run();
          } else {
            expect((await app.http.post('/v1/admin/compact')).status).toBe(200);
          }
        }
        const { computed, trailer, stats } = await serverDigests(app);
        expect(trailer.digest).toBe(computed);
        if (stats.head === trailer.offset) expect(stats.digest).toBe(computed);
        expect(stats.digestOffset).toBe(stats.head);
        const check = await mirror.verify();
        expect(check).toEqual({ ok: true, offset: stats.head, mirror: stats.digest, server: stats.digest });
      }),
      { numRuns: 25 },
    );
    expect(errors).toEqual([]);
  });

  it('a filtered snapshot (prefix or key) and its stream carry the digest of the keys they sent', async () => {
    t = await startApp({ STATELOG_SYNC: 'normal' });
    const app = t;
    await app.http.post('/v1/records').set(json).send({ records: [{ key: 'p/1', value: 1 }, { key: 'p/2', value: 2 }, { key: 'q', value: 3 }, { key: 'p/1', value: 4 }] });
    const expected = (keys: string[], lines: { key: string; offset: number }[]) => {
      expect(lines.map((line) => line.key)).toEqual(keys);
      return digestHex(digestOf(lines));
    };
    const snapshot = (await app.http.get('/v1/snapshot?prefix=p/')).text.trim().split('\n').map((line) => JSON.parse(line));
    const trailer = snapshot.pop();
    expect(trailer.digest).toBe(expected(['p/1', 'p/2'], snapshot));
    for (const query of ['prefix=p/', 'key=q']) {
      const controller = new AbortController();
      const res = await fetch(`${urlOf(app)}/v1/changes/stream?snapshot=true&${query}`, { signal: controller.signal });
      let text = '';
      const decoder = new TextDecoder();
      for await (const chunk of res.body!) {
        text += decoder.decode(chunk as Uint8Array, { stream: true });
        if (/event: snapshot-end\ndata: .*\n/.test(text)) break;
      }
      controller.abort();
      const records = [...text.matchAll(/event: record\ndata: (.*)\n/g)].map((m) => JSON.parse(m[1]!) as { key: string; offset: number });
      const end = JSON.parse(/event: snapshot-end\ndata: (.*)\n/.exec(text)![1]!) as { digest: string };
      expect(end.digest, query).toBe(expected(query === 'key=q' ? ['q'] : ['p/1', 'p/2'], records));
    }
  });

  it('a mirror restarted from its checkpoint keeps its digest and verifies', async () => {
    t = await startApp({ STATELOG_SYNC: 'normal' });
    const app = t;
    const checkpoint = join(app.dir, 'mirror.checkpoint');
    await app.http.post('/v1/records').set(json).send({ records: [{ key: 'a', value: 1 }, { key: 'b', value: 2 }] });
    const first = mirrorOf(urlOf(app), { checkpoint });
    expect((await first.verify()).ok).toBe(true);
    await first.close();
    mirrors = mirrors.filter((m) => m !== first);
    await app.http.post('/v1/records').set(json).send({ records: [{ key: 'a', op: 'delete' }, { key: 'c', value: 3 }] });
    const second = mirrorOf(urlOf(app), { checkpoint });
    await second.ready;
    expect(second.digest).toBe(first.digest);
    const check = await second.verify();
    expect(check).toMatchObject({ ok: true, offset: 4 });
  });

  it('a mirror fed a wrong record reports both digests, at snapshot-end and on verify()', async () => {
    t = await startApp({ STATELOG_SYNC: 'normal' });
    const app = t;
    await app.http.post('/v1/records').set(json).send({ records: [{ key: 'victim', value: 1 }, { key: 'other', value: 2 }] });
    // A proxy that renames the key "victim" in everything the server sends.
    const upstream = urlOf(app);
    proxy = createServer((req, res) => {
      void (async () => {
        const answer = await fetch(`${upstream}${req.url}`, { headers: { accept: req.headers.accept ?? '*/*' } });
        res.writeHead(answer.status, Object.fromEntries(answer.headers));
        const body = Readable.fromWeb(answer.body as import('node:stream/web').ReadableStream);
        body.on('data', (chunk: Buffer) => res.write(chunk.toString('utf8').replaceAll('"key":"victim"', '"key":"victim2"')));
        body.on('end', () => res.end());
        res.on('close', () => body.destroy());
      })().catch(() => res.destroy());
    });
    await new Promise<void>((resolve) => proxy!.listen(0, '127.0.0.1', resolve));
    const mirror = mirrorOf(`http://127.0.0.1:${(proxy.address() as { port: number }).port}`);
    const mismatches: DigestMismatchError[] = [];
    mirror.on('error', (err) => {
      if (err instanceof DigestMismatchError) mismatches.push(err);
    });
    await mirror.ready;
    expect(mirror.has('victim2')).toBe(true);
    expect(mismatches).toHaveLength(1);
    const { stats } = await serverDigests(app);
    expect(mismatches[0]!.check).toMatchObject({ ok: false, offset: 2, server: stats.digest });
    expect(mismatches[0]!.check.mirror).not.toBe(stats.digest);

    const check = await mirror.verify();
    expect(check).toMatchObject({ ok: false, offset: 2, server: stats.digest, mirror: mirror.digest });
    expect(mismatches).toHaveLength(2);
  });
});
