// Consumers on two nodes of one database: a position committed on one node is read on the
// other, racing commits of one consumer never move it backwards, and a hold set through one
// node keeps delete markers from a compaction run by the other.
import { afterEach, expect, it } from 'vitest';
import { fixture, http, NO_SHEDDING, type Fixture } from './fixtures.js';

let f: Fixture | undefined;
afterEach(async () => {
  await f?.cleanup();
  f = undefined;
});

it('shares positions across nodes; racing commits leave the highest; a hold holds on every node', async () => {
  f = await fixture();
  const [a, b] = await Promise.all([f.spawn({ ...NO_SHEDDING, STATELOG_TOMBSTONE_RETENTION_MS: '0' }), f.spawn(NO_SHEDDING)]);
  for (let i = 0; i < 40; i++) expect((await http(a!.url, 'PUT', `/v1/keys/k${i}`, { value: i })).status).toBe(200);

  // 40 commits of offsets 1..40, shuffled over both nodes at once: each is accepted or refused
  // as behind, and the consumer ends at 40, whichever order they committed in.
  const offsets = Array.from({ length: 40 }, (_, i) => i + 1).sort(() => Math.random() - 0.5);
  const answers = await Promise.all(offsets.map((offset, i) => http((i % 2 ? a : b)!.url, 'PUT', '/v1/consumers/racer', { offset })));
  for (const answer of answers) expect([200, 409]).toContain(answer.status);
  for (const answer of answers.filter((x) => x.status === 409)) expect(answer.body.error.code).toBe('conflict');
  for (const node of [a, b]) expect((await http(node!.url, 'GET', '/v1/consumers/racer')).body).toMatchObject({ offset: 40, lag: 0 });

  expect((await http(b!.url, 'PUT', '/v1/consumers/held', { offset: 40, hold: true })).status).toBe(200);
  expect((await http(b!.url, 'DELETE', '/v1/keys/k0')).status).toBe(200); // 41
  const compact = await http(a!.url, 'POST', '/v1/admin/compact');
  expect(compact.status).toBe(200);
  expect(compact.body).toMatchObject({ tombstonesRemoved: 0, horizon: 0 });
  expect((await http(a!.url, 'GET', '/v1/changes?after=40')).body.records).toEqual([expect.objectContaining({ key: 'k0', op: 'delete' })]);
  expect((await http(a!.url, 'DELETE', '/v1/consumers/held')).status).toBe(204);
  expect((await http(a!.url, 'POST', '/v1/admin/compact')).body).toMatchObject({ tombstonesRemoved: 1, horizon: 41 });
  const listed = await http(b!.url, 'GET', '/v1/consumers');
  expect(listed.body.consumers.map((c: { name: string }) => c.name)).toEqual(['racer']);
});
