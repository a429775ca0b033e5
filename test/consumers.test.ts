// Consumers through the real app, on either store: commits that only move forward unless
// rewound, If-Match, epochs, per-token names, holds on compaction and their release, /metrics,
// and positions that outlive the process.
import parsePrometheus from 'parse-prometheus-text-format';
import { afterEach, describe, expect, it } from 'vitest';
import { json, startApp, tempDir, type TestApp } from './support/helpers.js';
import { writeTokenFile, type TestToken } from './support/token-file.js';

let t: TestApp | undefined;
afterEach(async () => {
  await t?.close();
  t = undefined;
});

const app = () => t!;
const put = (key: string, value: unknown) => app().http.put(`/v1/keys/${encodeURIComponent(key)}`).set(json).send({ value });
const del = (key: string) => app().http.delete(`/v1/keys/${encodeURIComponent(key)}`);
const commit = (name: string, body: unknown, headers: Record<string, string> = {}) =>
  app().http.put(`/v1/consumers/${encodeURIComponent(name)}`).set({ ...json, ...headers }).send(body as object);
const show = (name: string, headers: Record<string, string> = {}) => app().http.get(`/v1/consumers/${encodeURIComponent(name)}`).set(headers);

describe('consumers', () => {
  it('commits a position, reads it back with its lag, lists and deletes it', async () => {
    t = await startApp();
    for (let i = 0; i < 5; i++) await put(`k${i}`, i);
    const epoch = (await app().http.get('/v1/changes')).body.epoch as string;
    const before = Date.now();
    const committed = await commit('billing', { offset: 3, epoch });
    expect(committed.status).toBe(200);
    expect(committed.headers.etag).toBe('"3"');
    expect(committed.body).toEqual({ name: 'billing', offset: 3, epoch, committedAt: expect.any(Number), lag: 2, hold: false });
    expect(committed.body.committedAt).toBeGreaterThanOrEqual(before);

    await put('k5', 5);
    const shown = await show('billing');
    expect(shown.status).toBe(200);
    expect(shown.headers.etag).toBe('"3"');
    expect(shown.body).toMatchObject({ name: 'billing', offset: 3, lag: 3, hold: false });

    await commit('audit', { offset: 6, hold: true });
    const list = await app().http.get('/v1/consumers');
    expect(list.status).toBe(200);
    expect(list.body).toMatchObject({ head: 6, epoch });
    expect(list.body.consumers.map((c: { name: string; lag: number; hold: boolean }) => [c.name, c.lag, c.hold])).toEqual([
      ['audit', 0, true],
      ['billing', 3, false],
    ]);

    expect((await app().http.delete('/v1/consumers/billing')).status).toBe(204);
    expect((await show('billing')).status).toBe(404);
    expect((await app().http.delete('/v1/consumers/billing')).body.error.code).toBe('not_found');
  });

  it('moves only forward unless rewound, never past the head, and only within its epoch', async () => {
    t = await startApp();
    for (let i = 0; i < 4; i++) await put(`k${i}`, i);
    expect((await commit('w', { offset: 3 })).status).toBe(200);
    expect((await commit('w', { offset: 3 })).status).toBe(200);
    const behind = await commit('w', { offset: 1 });
    expect(behind.status).toBe(409);
    expect(behind.body.error).toMatchObject({ code: 'conflict', currentOffset: 3 });
    const rewound = await commit('w', { offset: 1, rewind: true });
    expect(rewound.status).toBe(200);
    expect(rewound.body.offset).toBe(1);

    const ahead = await commit('w', { offset: 5 });
    expect(ahead.status).toBe(410);
    expect(ahead.body.error).toMatchObject({ code: 'offset_ahead', head: 4 });
    const otherEpoch = await commit('w', { offset: 2, epoch: '0123456789abcdef0123456789abcdef' });
    expect(otherEpoch.status).toBe(410);
    expect(otherEpoch.body.error).toMatchObject({ code: 'epoch_changed', epoch: expect.any(String) });
    expect((await show('w')).body.offset).toBe(1);
  });

  it('takes If-Match and If-None-Match as keys do, the offset being its ETag', async () => {
    t = await startApp();
    for (let i = 0; i < 4; i++) await put(`k${i}`, i);
    expect((await commit('w', { offset: 1 }, { 'if-match': '*' })).body.error).toMatchObject({ code: 'precondition_failed', currentOffset: null });
    expect((await commit('w', { offset: 1 }, { 'if-none-match': '*' })).status).toBe(200);
    expect((await commit('w', { offset: 2 }, { 'if-none-match': '*' })).status).toBe(412);
    const stale = await commit('w', { offset: 3 }, { 'if-match': '"2"' });
    expect(stale.status).toBe(412);
    expect(stale.body.error).toMatchObject({ code: 'precondition_failed', currentOffset: 1 });
    expect((await commit('w', { offset: 3 }, { 'if-match': '"1"' })).status).toBe(200);
    expect((await app().http.delete('/v1/consumers/w').set('if-match', '"1"')).status).toBe(412);
    expect((await app().http.delete('/v1/consumers/w').set('if-match', '"3"')).status).toBe(204);
  });

  it('refuses bad names and bodies with 400', async () => {
    t = await startApp();
    const cases: [string, unknown][] = [
      ['', { offset: 0 }],
      ['w', { offset: -1 }],
      ['w', { offset: 1.5 }],
      ['w', { offset: '1' }],
      ['w', {}],
      ['w', { offset: 0, hold: 'yes' }],
      ['w', { offset: 0, other: 1 }],
      ['a'.repeat(2000), { offset: 0 }],
    ];
    for (const [name, body] of cases) {
      const answer = await commit(name, body);
      expect(answer.status, JSON.stringify(body)).toBe(400);
      expect(['invalid_request', 'invalid_key']).toContain(answer.body.error.code);
    }
    expect((await commit('w', { offset: 0 }, { 'if-match': 'abc' })).status).toBe(400);
    expect((await app().http.get('/v1/consumers')).body.consumers).toEqual([]);
  });

  it('gives each scoped token consumers of its own; unscoped tokens list them all with their owner', async () => {
    const dir = tempDir();
    const tokens: TestToken[] = [
      { name: 'svc-a', secret: 'secret-a', role: 'write', prefixes: ['a/'] },
      { name: 'svc-b', secret: 'secret-b', role: 'write', prefixes: ['b/'] },
      { name: 'ops', secret: 'secret-ops', role: 'admin' },
    ];
    t = await startApp({ STATELOG_TOKENS_FILE: writeTokenFile(dir, tokens) }, { dir });
    const as = (secret: string) => ({ authorization: `Bearer ${secret}` });
    await app().http.put('/v1/keys/a%2Fk').set({ ...json, ...as('secret-a') }).send({ value: 1 });
    await app().http.put('/v1/keys/b%2Fk').set({ ...json, ...as('secret-b') }).send({ value: 1 });
    expect((await commit('worker', { offset: 1 }, as('secret-a'))).status).toBe(200);
    expect((await commit('worker', { offset: 2 }, as('secret-b'))).status).toBe(200);
    expect((await show('worker', as('secret-a'))).body.offset).toBe(1);
    expect((await show('worker', as('secret-b'))).body.offset).toBe(2);
    // The unscoped token's own namespace has no "worker".
    expect((await show('worker', as('secret-ops'))).status).toBe(404);
    const mine = await app().http.get('/v1/consumers').set(as('secret-a'));
    expect(mine.body.consumers).toEqual([expect.objectContaining({ name: 'worker', offset: 1 })]);
    expect(mine.body.consumers[0]).not.toHaveProperty('owner');
    const all = await app().http.get('/v1/consumers').set(as('secret-ops'));
    expect(all.body.consumers.map((c: { owner: string; name: string }) => [c.owner, c.name])).toEqual([
      ['svc-a', 'worker'],
      ['svc-b', 'worker'],
    ]);
    expect((await app().http.delete('/v1/consumers/worker').set(as('secret-ops'))).status).toBe(404);
    expect((await app().http.get('/v1/consumers').set(as('wrong'))).status).toBe(401);
  });

  it('a holding consumer keeps the delete markers above it: it never meets offset_compacted while it keeps up', async () => {
    t = await startApp({ STATELOG_TOMBSTONE_RETENTION_MS: '0' });
    for (const key of ['a', 'b', 'c', 'd']) await put(key, 1);
    expect((await commit('held', { offset: 4, hold: true })).status).toBe(200);
    expect((await commit('free', { offset: 4 })).status).toBe(200);
    await del('a'); // 5
    await del('b'); // 6
    const compact = await app().http.post('/v1/admin/compact');
    expect(compact.body).toMatchObject({ tombstonesRemoved: 0, horizon: 0 });
    // Both read on from 4 (the hold keeps the markers for the free one too).
    const changes = await app().http.get('/v1/changes').query({ after: 4 });
    expect(changes.status).toBe(200);
    expect(changes.body.records.map((r: { key: string; op: string }) => `${r.op} ${r.key}`)).toEqual(['delete a', 'delete b']);

    // The held consumer moves past the first marker: that one may go now, the second may not.
    expect((await commit('held', { offset: 5 })).status).toBe(200);
    expect((await app().http.post('/v1/admin/compact')).body).toMatchObject({ tombstonesRemoved: 1, horizon: 5 });
    expect((await app().http.get('/v1/changes').query({ after: 5 })).status).toBe(200);
    expect((await app().http.get('/v1/changes').query({ after: 4 })).body.error).toMatchObject({ code: 'offset_compacted', horizon: 5 });

    // Without a hold, the rest goes.
    expect((await commit('held', { offset: 5, hold: false })).body.hold).toBe(false);
    expect((await app().http.post('/v1/admin/compact')).body).toMatchObject({ tombstonesRemoved: 1, horizon: 6 });
  });

  it('releases a hold past its lag bound: logged, counted, shown; asking again arms it anew', async () => {
    t = await startApp({ STATELOG_TOMBSTONE_RETENTION_MS: '0', STATELOG_CONSUMER_HOLD_MAX_RECORDS: '3' });
    await put('a', 1);
    await commit('slow', { offset: 1, hold: true });
    await del('a'); // 2
    for (let i = 0; i < 3; i++) await put(`k${i}`, i); // head 5: lag 4 > 3
    const compact = await app().http.post('/v1/admin/compact');
    expect(compact.body).toMatchObject({ tombstonesRemoved: 1, horizon: 2 });
    const shown = await show('slow');
    expect(shown.body).toMatchObject({ hold: false, lag: 4, holdReleasedAt: expect.any(Number) });
    expect((await app().http.get('/v1/changes').query({ after: 1 })).body.error.code).toBe('offset_compacted');

    const metrics = parsePrometheus((await app().http.get('/metrics')).text);
    const sample = (name: string) => metrics.find((family) => family.name === name)?.metrics;
    expect(sample('statelog_consumer_hold_releases_total')).toEqual([expect.objectContaining({ value: '1' })]);
    expect(sample('statelog_consumer_lag_records')).toEqual([{ labels: { consumer: 'slow', owner: '' }, value: '4' }]);
    expect(sample('statelog_consumer_hold')).toEqual([{ labels: { consumer: 'slow', owner: '' }, value: '0' }]);
    expect(Number(sample('statelog_consumer_commit_age_seconds')![0]!.value)).toBeGreaterThanOrEqual(0);

    const again = await commit('slow', { offset: 5, hold: true });
    expect(again.body).toMatchObject({ hold: true, lag: 0 });
    expect(again.body).not.toHaveProperty('holdReleasedAt');
  });

  it('survives a restart of the store', async () => {
    t = await startApp();
    await put('a', 1);
    await put('b', 1);
    await commit('w', { offset: 2, hold: true });
    await t.app.close();
    const reopened = await t.database.openStore();
    try {
      const { row, position } = await reopened.consumers.get('', 'w');
      expect(row).toMatchObject({ name: 'w', offset: 2, hold: true, epoch: position.epoch });
    } finally {
      await reopened.close();
    }
    await t.database.drop();
    t = undefined;
  });
});
