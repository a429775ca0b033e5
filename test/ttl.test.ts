// Per-key TTL through the HTTP API: expiry answers 404 at once, the expirer's tombstone
// follows through the write path, and a write without a TTL clears it.
import { afterEach, describe, expect, it } from 'vitest';
import { StatelogClient } from '@statelog/client';
import { LIST_SCAN_SLACK } from '../src/store/log-store.js';
import { EXPIRIES_PER_COMMIT, EXPIRIES_PER_TTL_WRITE, EXPIRY_TIME_SHARE } from '../src/writes/write-batcher.js';
import { json, startApp, tempDir, type TestApp } from './support/helpers.js';
import { writeTokenFile } from './support/token-file.js';

let t: TestApp | undefined;
afterEach(async () => {
  await t?.close();
  t = undefined;
});

const put = (app: TestApp, key: string, body: Record<string, unknown>, headers: Record<string, string> = {}) =>
  app.http.put(`/v1/keys/${encodeURIComponent(key)}`).set({ ...json, ...headers }).send(body);
const sleepUntil = async (ms: number) => {
  while (Date.now() <= ms) await new Promise((resolve) => setTimeout(resolve, Math.max(1, ms - Date.now() + 1)));
};

/** An app with its expirer off and `count` keys (due/0...) past their TTL. */
async function withDueKeys(count: number): Promise<TestApp> {
  const app = (t = await startApp({ STATELOG_EXPIRY_INTERVAL_MS: '0' }));
  for (let at = 0; at < count; at += 1000) {
    const records = Array.from({ length: Math.min(1000, count - at) }, (_, i) => ({ key: `due/${at + i}`, value: i, ttlMs: 100 }));
    await app.http.post('/v1/records').set(json).send({ records }).expect(200);
  }
  await new Promise((resolve) => setTimeout(resolve, 150));
  return app;
}

describe('TTL', () => {
  it('expires a key: GET says when, then 404 at once, then one tombstone in the changes', async () => {
    t = await startApp({ STATELOG_EXPIRY_INTERVAL_MS: '0' });
    const app = t;
    const written = await put(app, 'session', { value: { user: 1 }, ttlMs: 400 });
    expect(written.status).toBe(200);
    await put(app, 'forever', { value: 1 });
    const read = await app.http.get('/v1/keys/session');
    expect(read.status).toBe(200);
    const expiresAt = read.body.expiresAt as number;
    expect(expiresAt).toBeGreaterThan(Date.now());
    expect(expiresAt).toBeLessThanOrEqual(Date.now() + 400);
    expect((await app.http.get('/v1/keys/forever')).body.expiresAt).toBeUndefined();

    await sleepUntil(expiresAt);
    // No tombstone yet (the expirer is off): reads and conditions already see no value.
    expect((await app.http.get('/v1/keys/session')).status).toBe(404);
    expect((await app.http.get('/v1/keys')).body.items.map((item: { key: string }) => item.key)).toEqual(['forever']);
    expect((await put(app, 'session', { value: 2 }, { 'if-match': `"${written.body.offset}"` })).status).toBe(412);
    expect((await app.http.delete('/v1/keys/session')).status).toBe(404);
    expect((await app.http.get('/v1/changes?after=0')).body.records).toHaveLength(2);

    expect(await app.app.services.expirer.run()).toBe(1);
    expect(await app.app.services.expirer.run()).toBe(0);
    const changes = (await app.http.get('/v1/changes?after=0')).body.records;
    expect(changes.map((r: { key: string; op: string }) => `${r.op} ${r.key}`)).toEqual(['set session', 'set forever', 'delete session']);
    expect((await app.http.get('/v1/stats')).body).toMatchObject({ liveKeys: 1, tombstones: 1 });
  });

  it('a write without a TTL clears it; a new TTL replaces it; incr clears it', async () => {
    t = await startApp({ STATELOG_EXPIRY_INTERVAL_MS: '0' });
    const app = t;
    await put(app, 'a', { value: 1, ttlMs: 200 });
    await put(app, 'a', { value: 2 });
    await put(app, 'b', { value: 1, ttlMs: 200 });
    await put(app, 'b', { value: 2, ttlMs: 60_000 });
    await app.http.post('/v1/records').set(json).send({ records: [{ key: 'c', value: 5, ttlMs: 200 }, { key: 'c', op: 'incr', by: 1 }] });
    await new Promise((resolve) => setTimeout(resolve, 250));
    expect(await app.app.services.expirer.run()).toBe(0);
    expect((await app.http.get('/v1/keys/a')).body).toMatchObject({ value: 2 });
    expect((await app.http.get('/v1/keys/a')).body.expiresAt).toBeUndefined();
    expect((await app.http.get('/v1/keys/b')).body.expiresAt).toBeGreaterThan(Date.now() + 50_000);
    expect((await app.http.get('/v1/keys/c')).body).toMatchObject({ value: 6 });
  });

  it('an incr on an expired key counts from 0, and a set revives it with no tombstone in between', async () => {
    t = await startApp({ STATELOG_EXPIRY_INTERVAL_MS: '0' });
    const app = t;
    await app.http.post('/v1/records').set(json).send({ records: [{ key: 'n', value: 41, ttlMs: 100 }, { key: 'm', value: 1, ttlMs: 100 }] });
    await new Promise((resolve) => setTimeout(resolve, 150));
    const incr = await app.http.post('/v1/records').set(json).send({ records: [{ key: 'n', op: 'incr', by: 1 }] });
    expect(incr.body.records[0].value).toBe(1);
    expect((await put(app, 'm', { value: 2 }, { 'if-none-match': '*' })).status).toBe(200);
    // Both were written again: the expirer's conditional deletes find nothing due.
    expect(await app.app.services.expirer.run()).toBe(0);
    expect((await app.http.get('/v1/keys/m')).body.value).toBe(2);
  });

  it('batch items take ttlMs; bad values are 400', async () => {
    t = await startApp({ STATELOG_EXPIRY_INTERVAL_MS: '0' });
    const app = t;
    for (const ttlMs of [0, -1, 1.5, '10', 365 * 24 * 3600 * 1000 + 1]) {
      const res = await put(app, 'k', { value: 1, ttlMs });
      expect(res.status, String(ttlMs)).toBe(400);
      expect(res.body.error.code).toBe('invalid_request');
      const batch = await app.http.post('/v1/records').set(json).send({ records: [{ key: 'k', value: 1, ttlMs }] });
      expect(batch.status).toBe(400);
    }
    for (const item of [{ key: 'k', op: 'delete', ttlMs: 5 }, { key: 'k', op: 'incr', by: 1, ttlMs: 5 }]) {
      const res = await app.http.post('/v1/records').set(json).send({ records: [item] });
      expect(res.status).toBe(400);
      expect(res.body.error.message).toMatch(/ttlMs/);
    }
    const ok = await app.http.post('/v1/records').set(json).send({ records: [{ key: 'k', value: 1, ttlMs: 365 * 24 * 3600 * 1000 }] });
    expect(ok.status).toBe(200);
  });

  it('the timer writes the tombstones by itself', async () => {
    t = await startApp({ STATELOG_EXPIRY_INTERVAL_MS: '50' });
    const app = t;
    const records = Array.from({ length: 30 }, (_, i) => ({ key: `k${i}`, value: i, ttlMs: 100 }));
    await app.http.post('/v1/records').set(json).send({ records });
    const deadline = Date.now() + 10_000;
    let stats;
    do {
      await new Promise((resolve) => setTimeout(resolve, 50));
      stats = (await app.http.get('/v1/stats')).body;
    } while (stats.liveKeys + stats.expiredKeys > 0 && Date.now() < deadline);
    expect(stats).toMatchObject({ liveKeys: 0, expiredKeys: 0, tombstones: 30, head: 60 });
  });

  it('a backlog of due keys is deleted in steps that grow with it, not 25 at a time', async () => {
    t = await startApp({ STATELOG_EXPIRY_INTERVAL_MS: '0' });
    const app = t;
    for (let at = 0; at < 3000; at += 1000) {
      const records = Array.from({ length: 1000 }, (_, i) => ({ key: `k${at + i}`, value: i, ttlMs: 100 }));
      await app.http.post('/v1/records').set(json).send({ records }).expect(200);
    }
    await new Promise((resolve) => setTimeout(resolve, 150));
    expect((await app.http.get('/v1/stats')).body).toMatchObject({ liveKeys: 0, expiredKeys: 3000 });
    expect(await app.app.services.expirer.run()).toBe(3000);
    // 25, 100, 400, then 1000 a step: 3000 keys in 6 steps, where 25 a step took 121.
    expect(app.app.services.expirer.steps).toBeLessThanOrEqual(6);
    expect((await app.http.get('/v1/stats')).body).toMatchObject({ liveKeys: 0, expiredKeys: 0, tombstones: 3000 });
  });

  it('under ingest, a step takes twice what others wrote during the last one, so the backlog shrinks', async () => {
    // The pace of the steps is what is looked at, not the write deadline: on a busy machine the
    // lane's last deletes of a 1,000-delete step, yielding to 1,000-record batches, can wait
    // past the default 10 s (then the run fails and the next period retries them).
    t = await startApp({ STATELOG_EXPIRY_INTERVAL_MS: '0', STATELOG_WRITE_TIMEOUT_MS: '60000' });
    const app = t;
    for (let at = 0; at < 12_000; at += 1000) {
      const records = Array.from({ length: 1000 }, (_, i) => ({ key: `due/${at + i}`, value: i, ttlMs: 100 }));
      await app.http.post('/v1/records').set(json).send({ records }).expect(200);
    }
    await new Promise((resolve) => setTimeout(resolve, 150));
    let writing = true;
    const writer = (async () => {
      for (let round = 0; writing; round++) {
        const records = Array.from({ length: 1000 }, (_, i) => ({ key: `plain/${round}/${i}`, value: i }));
        await app.http.post('/v1/records').set(json).send({ records }).expect(200);
      }
    })();
    try {
      expect(await app.app.services.expirer.run()).toBe(12_000);
    } finally {
      writing = false;
      await writer;
    }
    // Without the writer's pace: 25, 100, 400, then 1000 a step, 15 steps.
    expect(app.app.services.expirer.steps).toBeLessThan(15);
    expect((await app.http.get('/v1/stats')).body).toMatchObject({ expiredKeys: 0, tombstones: 12_000 });
  });

  it('a group commit takes writers first, then at most EXPIRIES_PER_COMMIT deletes beyond EXPIRIES_PER_TTL_WRITE per TTL set, whatever the step', async () => {
    const app = await withDueKeys(3000);
    // Each group as the store is asked to commit it: its requests, in order.
    const { store } = app.app.services;
    const commit = store.commit.bind(store);
    const groups: { expiry: boolean; ops: number; ttlSets: number }[][] = [];
    store.commit = (requests, now, onApplied) => {
      groups.push(
        requests.map((request) => ({
          expiry: request.ops.some((op) => op.op === 'delete' && op.expiry === true),
          ops: request.ops.length,
          ttlSets: request.ops.filter((op) => op.op === 'set' && op.ttlMs !== undefined).length,
        })),
      );
      return commit(requests, now, onApplied);
    };
    let writing = true;
    // PUTs without a TTL, and batches of sets with one (which come due long after the test).
    const writers = [
      ...Array.from({ length: 3 }, async (_, w) => {
        for (let i = 0; writing; i++) await put(app, `plain/${w}/${i % 10}`, { value: i }).expect(200);
      }),
      (async () => {
        for (let i = 0; writing; i++) {
          const records = Array.from({ length: 10 }, (_, j) => ({ key: `later/${i}/${j}`, value: j, ttlMs: 600_000 }));
          await app.http.post('/v1/records').set(json).send({ records }).expect(200);
        }
      })(),
    ];
    try {
      expect(await app.app.services.expirer.run()).toBe(3000);
    } finally {
      writing = false;
      await Promise.all(writers);
    }
    // Steps of 400 and 1000 deletes, each spread over groups beside the writers' requests.
    expect(app.app.services.expirer.steps).toBeLessThanOrEqual(6);
    const summaries = groups.map((group) => ({
      writers: group.filter((r) => !r.expiry).length,
      ttlSets: group.reduce((sum, r) => sum + r.ttlSets, 0),
      expiries: group.filter((r) => r.expiry).length,
      // The writers' requests come first: no delete before a writer's request.
      writersFirst: group.every((r, i) => r.expiry || i === 0 || !group[i - 1]!.expiry),
    }));
    expect(summaries.some((g) => g.writers > 0 && g.expiries > 0)).toBe(true);
    expect(summaries.filter((g) => g.expiries > EXPIRIES_PER_COMMIT + EXPIRIES_PER_TTL_WRITE * g.ttlSets)).toEqual([]);
    expect(summaries.filter((g) => !g.writersFirst)).toEqual([]);
    expect((await app.http.get('/v1/stats')).body).toMatchObject({ expiredKeys: 0, tombstones: 3000 });
  });

  it('a mass expiry takes about EXPIRY_TIME_SHARE of the commit time, not all of it', async () => {
    const app = await withDueKeys(3000);
    // Each group's commit: when it started, and when the store was done with it.
    const { store } = app.app.services;
    const commit = store.commit.bind(store);
    const spans: { start: number; end: number }[] = [];
    store.commit = (requests, now, onApplied) => {
      const span = { start: performance.now(), end: 0 };
      spans.push(span);
      // SQLite does the group's work before returning, PostgreSQL until it says the group is
      // applied (the next group commits while this one waits to be durable).
      const committing = commit(requests, now, () => {
        span.end = performance.now();
        onApplied?.();
      });
      if (store.appliesBeforeReturning) span.end = performance.now();
      return committing;
    };
    expect(await app.app.services.expirer.run()).toBe(3000);
    const busy = spans.reduce((sum, span) => sum + (span.end - span.start), 0);
    const wall = spans.at(-1)!.end - spans[0]!.start;
    // Each group's time is followed by three times as long without one (timers only wait longer).
    expect(busy / wall).toBeLessThan(EXPIRY_TIME_SHARE + 0.1);
    expect(spans.length).toBeGreaterThanOrEqual(3000 / EXPIRIES_PER_COMMIT);
  });

  it('a listing page steps over at most LIST_SCAN_SLACK rows that show nothing, then goes on after them; what it lists equals GET', async () => {
    t = await startApp({ STATELOG_EXPIRY_INTERVAL_MS: '0' });
    const app = t;
    const expiring = 2 * LIST_SCAN_SLACK + 500;
    for (let at = 0; at < expiring; at += 1000) {
      const records = Array.from({ length: Math.min(1000, expiring - at) }, (_, i) => ({ key: `b/${String(at + i).padStart(6, '0')}`, value: i, ttlMs: 50 }));
      await app.http.post('/v1/records').set(json).send({ records }).expect(200);
    }
    const live = ['a/1', 'a/2', 'b/later', 'c/1', 'c/2'];
    await app.http
      .post('/v1/records')
      .set(json)
      .send({ records: live.map((key) => ({ key, value: key, ...(key === 'b/later' ? { ttlMs: 600_000 } : {}) })) })
      .expect(200);
    await new Promise((resolve) => setTimeout(resolve, 100));
    const listed: { key: string }[] = [];
    const pageSizes: number[] = [];
    let cursor: string | null = null;
    do {
      const page = (await app.http.get('/v1/keys').query({ limit: 3, ...(cursor === null ? {} : { cursor }) }).expect(200)).body as { items: { key: string }[]; cursor: string | null };
      listed.push(...page.items);
      pageSizes.push(page.items.length);
      cursor = page.cursor;
    } while (cursor !== null);
    expect(listed.map((item) => item.key)).toEqual(live);
    for (const item of listed) expect(item).toEqual((await app.http.get(`/v1/keys/${encodeURIComponent(item.key)}`)).body);
    expect((await app.http.get('/v1/keys/b%2F000000')).status).toBe(404);
    // The expired run took pages of its own: no page examined all of it.
    expect(pageSizes).toContain(0);
  });

  it('a scoped listing over several prefixes goes on in the prefix whose page stopped at its scan bound', async () => {
    const dir = tempDir();
    const tokens = writeTokenFile(dir, [{ name: 'bc', secret: 'bc-secret', role: 'write', prefixes: ['b/', 'c/'] }]);
    t = await startApp({ STATELOG_EXPIRY_INTERVAL_MS: '0', STATELOG_TOKENS_FILE: tokens }, { dir });
    const app = t;
    const auth = { ...json, authorization: 'Bearer bc-secret' };
    const expiring = LIST_SCAN_SLACK + 500;
    for (let at = 0; at < expiring; at += 1000) {
      const records = Array.from({ length: Math.min(1000, expiring - at) }, (_, i) => ({ key: `b/${String(at + i).padStart(6, '0')}`, value: i, ttlMs: 50 }));
      await app.http.post('/v1/records').set(auth).send({ records }).expect(200);
    }
    await app.http.post('/v1/records').set(auth).send({ records: [{ key: 'b/later', value: 1 }, { key: 'c/1', value: 2 }] }).expect(200);
    await new Promise((resolve) => setTimeout(resolve, 100));
    const listed: string[] = [];
    let cursor: string | null = null;
    do {
      const page = (await app.http.get('/v1/keys').set(auth).query({ limit: 5, ...(cursor === null ? {} : { cursor }) }).expect(200)).body as { items: { key: string }[]; cursor: string | null };
      listed.push(...page.items.map((item) => item.key));
      cursor = page.cursor;
    } while (cursor !== null);
    expect(listed).toEqual(['b/later', 'c/1']);
  });

  it('the expiry travels with the key: listings, snapshot lines, stream snapshots and changes carry it; liveKeys agrees with GET', async () => {
    t = await startApp({ STATELOG_EXPIRY_INTERVAL_MS: '0' });
    const app = t;
    await put(app, 'forever', { value: 1 });
    await put(app, 'session', { value: { user: 1 }, ttlMs: 700 });
    const expiresAt = (await app.http.get('/v1/keys/session')).body.expiresAt as number;
    const listed = (await app.http.get('/v1/keys')).body.items;
    expect(listed).toEqual([
      { key: 'forever', value: 1, offset: 1, ts: expect.any(Number) },
      { key: 'session', value: { user: 1 }, offset: 2, ts: expect.any(Number), expiresAt },
    ]);
    const changes = (await app.http.get('/v1/changes?after=0')).body.records;
    expect(changes.map((r: { expiresAt?: number }) => r.expiresAt)).toEqual([undefined, expiresAt]);
    const snapshotLines = () =>
      app.http.get('/v1/snapshot').then((res) => res.text.trim().split('\n').map((line) => JSON.parse(line) as Record<string, unknown>));
    expect((await snapshotLines())[1]).toEqual({ key: 'session', value: { user: 1 }, offset: 2, ts: expect.any(Number), expiresAt });
    const stream = await readStreamSnapshot(app);
    expect(stream).toContainEqual({ offset: 2, key: 'session', op: 'set', value: { user: 1 }, ts: expect.any(Number), expiresAt });
    expect((await app.http.get('/v1/stats')).body).toMatchObject({ liveKeys: 2, expiredKeys: 0 });

    await sleepUntil(expiresAt);
    // Past the expiry, before the tombstone: everything that counts keys says what GET says.
    expect((await app.http.get('/v1/keys/session')).status).toBe(404);
    expect((await app.http.get('/v1/stats')).body).toMatchObject({ liveKeys: 1, expiredKeys: 1, tombstones: 0, dirtyRatio: 0 });
    // The snapshot is the log's state at its offset: the line stays, its expiry in the past.
    expect((await snapshotLines())[1]).toMatchObject({ key: 'session', expiresAt });
    // A set superseded by a later record no longer carries the expiry.
    await put(app, 'session', { value: 2 });
    const after = (await app.http.get('/v1/changes?after=0')).body.records;
    expect(after.map((r: { expiresAt?: number }) => r.expiresAt)).toEqual([undefined, undefined, undefined]);
    expect((await app.http.get('/v1/stats')).body).toMatchObject({ liveKeys: 2, expiredKeys: 0 });
  });
});

/** The records of a change stream's snapshot phase, read until its snapshot-end. */
async function readStreamSnapshot(app: TestApp): Promise<Record<string, unknown>[]> {
  const port = (app.app.server.address() as { port: number }).port;
  const res = await fetch(`http://127.0.0.1:${port}/v1/changes/stream?snapshot=true`);
  const records: Record<string, unknown>[] = [];
  let text = '';
  const decoder = new TextDecoder();
  for await (const chunk of res.body!) {
    text += decoder.decode(chunk as Uint8Array, { stream: true });
    if (text.includes('event: snapshot-end')) break;
  }
  await res.body!.cancel().catch(() => {});
  for (const block of text.split('\n\n')) {
    if (!block.includes('event: record')) continue;
    const data = block.split('\n').find((line) => line.startsWith('data: '))!;
    records.push(JSON.parse(data.slice(6)) as Record<string, unknown>);
  }
  return records;
}

describe('TTL through the client', () => {
  it('put and batch take ttlMs; get gives expiresAt, then null once expired', async () => {
    t = await startApp({ STATELOG_EXPIRY_INTERVAL_MS: '0' });
    const client = new StatelogClient({ url: `http://127.0.0.1:${(t.app.server.address() as { port: number }).port}` });
    try {
      // Long enough for the writes and the first read on a busy machine.
      await client.put('lease', { owner: 'w1' }, { ttlMs: 1500 });
      await client.batch([{ key: 'b', value: 1, ttlMs: 1500 }]);
      const entry = await client.get('lease');
      expect(entry).toMatchObject({ value: { owner: 'w1' }, expiresAt: expect.any(Number) });
      const later = await client.get('b');
      await sleepUntil(Math.max(entry!.expiresAt!, later!.expiresAt!));
      expect(await client.get('lease')).toBeNull();
      expect(await client.get('b')).toBeNull();
      expect(await t.app.services.expirer.run()).toBe(2);
    } finally {
      await client.close();
    }
  });
});
