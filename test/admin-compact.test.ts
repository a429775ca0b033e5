// POST /v1/admin/compact and lastCompaction in GET /v1/stats, through the real app.
import { afterEach, describe, expect, it } from 'vitest';
import { json, startApp, type TestApp } from './support/helpers.js';
import { keptCounters } from './support/store-helpers.js';

let t: TestApp;
afterEach(async () => {
  await t?.close();
});

const put = (key: string, value: unknown) => t.http.put(`/v1/keys/${encodeURIComponent(key)}`).set(json).send({ value });
const del = (key: string) => t.http.delete(`/v1/keys/${encodeURIComponent(key)}`);

describe('POST /v1/admin/compact', () => {
  it('removes superseded records and expired delete markers, and answers with the contract shape', async () => {
    t = await startApp({ STATELOG_TOMBSTONE_RETENTION_MS: '0' });
    for (let version = 0; version < 3; version++) {
      for (const key of ['a', 'b', 'c/1']) expect((await put(key, { version })).status).toBe(200);
    }
    expect((await del('b')).status).toBe(200); // offset 10, the head
    const stats = await t.http.get('/v1/stats');
    expect(stats.body).toMatchObject({ head: 10, records: 10, liveKeys: 2, tombstones: 1, lastCompaction: null });
    expect(stats.body.dirtyRatio).toBeCloseTo(7 / 10);

    const compact = await t.http.post('/v1/admin/compact');
    expect(compact.status).toBe(200);
    expect(Object.keys(compact.body).sort()).toEqual(['durationMs', 'head', 'horizon', 'removed', 'tombstonesRemoved']);
    expect(compact.body).toMatchObject({ removed: 8, tombstonesRemoved: 1, horizon: 10, head: 10 });
    expect(compact.body.durationMs).toBeGreaterThanOrEqual(0);

    expect((await t.http.get('/v1/keys/a')).body).toMatchObject({ value: { version: 2 }, offset: 7 });
    expect((await t.http.get('/v1/keys/b')).status).toBe(404);
    const after = await t.http.get('/v1/stats');
    expect(after.body).toMatchObject({ head: 10, records: 2, liveKeys: 2, tombstones: 0, dirtyRatio: 0, horizon: 10 });
    expect(after.body.lastCompaction).toMatchObject({
      trigger: 'admin',
      removed: 8,
      tombstonesRemoved: 1,
      horizon: 10,
      head: 10,
      durationMs: compact.body.durationMs,
    });
    expect(after.body.lastCompaction.startedAt).toBeGreaterThan(Date.now() - 60_000);
    expect(after.body.lastCompaction.bytesAfter).toBeGreaterThan(0);

    // The removed delete marker held the head: head stays, and the next offset is new.
    expect((await put('b', 1)).body).toEqual({ key: 'b', offset: 11 });
    expect(await keptCounters(t.app.services.store)).toEqual(await t.database.counted());
  });

  it('keeps delete markers younger than the retention, and records younger than the minimum lag', async () => {
    t = await startApp({ STATELOG_TOMBSTONE_RETENTION_MS: '3600000', STATELOG_MIN_COMPACTION_LAG_MS: '0' });
    await put('a', 1);
    await put('a', 2);
    await del('a');
    const compact = await t.http.post('/v1/admin/compact');
    expect(compact.body).toMatchObject({ removed: 2, tombstonesRemoved: 0, horizon: 0, head: 3 });
    expect((await t.http.get('/v1/stats')).body).toMatchObject({ records: 1, tombstones: 1, liveKeys: 0 });
    await t.close();

    t = await startApp({ STATELOG_MIN_COMPACTION_LAG_MS: '3600000' });
    await put('a', 1);
    await put('a', 2);
    expect((await t.http.post('/v1/admin/compact')).body).toMatchObject({ removed: 0, head: 2 });
  });

  it('joins a run in progress: concurrent calls get the same answer from one run', async () => {
    t = await startApp();
    await t.http
      .post('/v1/records')
      .set(json)
      .send({ records: Array.from({ length: 1000 }, (_, i) => ({ key: `k${i % 50}`, value: i })) });
    const answers = await Promise.all([t.http.post('/v1/admin/compact'), t.http.post('/v1/admin/compact')]);
    expect(answers.map((a) => a.status)).toEqual([200, 200]);
    expect(answers[1]!.body).toEqual(answers[0]!.body);
    expect(answers[0]!.body.removed).toBe(950);
    expect(t.app.services.compactor.runs).toBe(1);
  });

  it('answers 503 when the run fails, keeps serving, and a later run succeeds', async () => {
    t = await startApp();
    for (let i = 0; i < 20; i++) await put('k', i);
    const restore = await t.database.failCompaction('injected failure');
    const failed = await t.http.post('/v1/admin/compact');
    expect(failed.status).toBe(503);
    expect(failed.body.error.code).toBe('unavailable');
    expect(failed.body.error.message).not.toMatch(/injected/);
    expect(failed.headers['retry-after']).toBe('1');
    expect(t.app.services.compactor.failures).toBe(1);

    expect((await put('k', 'still writing')).status).toBe(200);
    expect((await t.http.get('/v1/stats')).body).toMatchObject({ records: 21, lastCompaction: null });

    await restore();
    expect((await t.http.post('/v1/admin/compact')).body).toMatchObject({ removed: 20, head: 21 });
    expect((await t.http.get('/v1/keys/k')).body.value).toBe('still writing');
  });
});

describe('the timer', () => {
  it('runs from the factory on STATELOG_COMPACT_INTERVAL_MS once the dirty ratio is reached', async () => {
    t = await startApp({ STATELOG_COMPACT_INTERVAL_MS: '20', STATELOG_MIN_DIRTY_RATIO: '0.5' });
    await put('a', 1);
    await put('b', 1);
    await put('a', 2); // 1 superseded of 3: below the ratio
    expect(t.app.services.compactor.runs).toBe(0);
    await put('a', 3); // 2 of 4
    await expect.poll(async () => (await t.http.get('/v1/stats')).body.lastCompaction, { timeout: 10_000 }).toMatchObject({
      trigger: 'dirty_ratio',
      removed: 2,
    });
    expect((await t.http.get('/v1/stats')).body).toMatchObject({ records: 2, dirtyRatio: 0 });
  });

  it('answers a run that lasts longer than the socket inactivity timeout', async () => {
    const silenceMs = 30;
    t = await startApp(
      { STATELOG_MIN_COMPACTION_LAG_MS: '0' },
      {
        seed: (database) => database.fillLog({ records: 200_000, keys: 1000 }),
        // connectionTimeout, shrunk: applied to each socket as it connects.
        prepare: (app) => void (app.server.timeout = silenceMs),
      },
    );
    const compact = await t.http.post('/v1/admin/compact');
    expect(compact.status).toBe(200);
    expect(compact.body).toMatchObject({ removed: 199_000 });
    // Otherwise the test proves nothing.
    expect(compact.body.durationMs).toBeGreaterThan(silenceMs * 2);
  });

  it('stops with the app: close waits for a run in progress, which ends at a step boundary', async () => {
    t = await startApp();
    for (let batch = 0; batch < 20; batch++) {
      await t.http
        .post('/v1/records')
        .set(json)
        .send({ records: Array.from({ length: 1000 }, (_, i) => ({ key: `k${i % 100}`, value: batch })) });
    }
    const store = t.app.services.store;
    const run = t.app.services.compactor.run();
    run.catch(() => {});
    await t.app.close();
    await expect(run).rejects.toThrow('the compactor stopped');
    await expect(store.ping(), 'the store is closed').rejects.toThrow();
    const reopened = await t.database.openStore();
    expect(await keptCounters(reopened)).toEqual(await t.database.counted());
    expect((await reopened.counters()).records).toBeLessThan(20_000);
    await reopened.close();
  });
});
