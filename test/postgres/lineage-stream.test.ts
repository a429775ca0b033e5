// Change streams of a node whose log changed under it as a failover changes it: a new
// generation (the first write on a new WAL timeline), or records the node saw committed that the
// database no longer has. The streams go on, and the node goes on answering. The node runs in a
// process of its own: a node that stopped answering would stop this file's timers too if it ran
// in the test's process.
import { afterEach, expect, it } from 'vitest';
import { fixture, http, type Fixture } from './fixtures.js';
import { StatelogClient } from '@statelog/client';
import { SseClient } from '../support/stream-clients.js';
import { processSeconds } from '../../bench/shared/cpu-share.js';

let f: Fixture | undefined;
afterEach(async () => {
  await f?.cleanup();
  f = undefined;
});

/**
 * A node that wrote offsets 1 to 4 and whose database then lost 3 and 4, as a failover loses
 * commits the promoted standby never had: the node saw no connection break, so it still takes
 * the head to be 4.
 */
async function nodeAheadOfItsDatabase() {
  f = await fixture();
  const node = await f.spawn();
  const records = [1, 2, 3, 4].map((n) => ({ key: `k${n}`, value: n }));
  expect((await http(node.url, 'POST', '/v1/records', { records })).status).toBe(200);
  const client = await f.connect();
  await client.query(`DELETE FROM log WHERE seq > 2`);
  await client.query(`DELETE FROM state WHERE seq > 2`);
  await client.query(`UPDATE meta SET head = 2, records = 2, state_keys = 2, live_keys = 2 WHERE id = 1`);
  return node;
}

it('a change stream waiting at the head goes on into a new generation, and the node keeps answering', async () => {
  f = await fixture();
  const node = await f.spawn();
  expect((await http(node.url, 'POST', '/v1/records', { records: [{ key: 'k1', value: 1 }, { key: 'k2', value: 2 }] })).status).toBe(200);
  const stream = await SseClient.connect(`${node.url}/v1/changes/stream?after=0`);
  const keysSeen = () => stream.events.filter((event) => event.event === 'record').map((event) => (JSON.parse(event.data) as { key: string }).key);
  await stream.until(() => keysSeen().includes('k2'), 5_000);

  // The meta row says the last write was on another timeline: the next write is the first of a
  // new generation, as the first write on a promoted standby is.
  const client = await f.connect();
  await client.query(`UPDATE meta SET timeline = 'FFFFFFFF' WHERE id = 1`);
  expect((await http(node.url, 'PUT', '/v1/keys/k3', { value: 3 })).status).toBe(200);
  const { rows } = await client.query<{ lineage: string }>('SELECT lineage FROM meta WHERE id = 1');
  expect(rows[0]!.lineage).toMatch(/,2-[0-9a-f]{8}:3$/);

  await stream.until(() => keysSeen().includes('k3'), 5_000);
  expect(keysSeen()).toEqual(['k1', 'k2', 'k3']);
  const health = await fetch(`${node.url}/healthz`, { signal: AbortSignal.timeout(2_000) });
  expect(health.status).toBe(200);
  stream.close();
}, 30_000);

it('a change stream behind a head the database no longer has waits for the next write, and the node keeps answering', async () => {
  const node = await nodeAheadOfItsDatabase();

  const stream = await SseClient.connect(`${node.url}/v1/changes/stream?after=2`);
  const health = await fetch(`${node.url}/healthz`, { signal: AbortSignal.timeout(2_000) });
  expect(health.status).toBe(200);
  // The next write is offset 3 in the database: the stream, waiting after 2, is given it.
  expect((await http(node.url, 'PUT', '/v1/keys/k5', { value: 5 })).status).toBe(200);
  await stream.until((events) => events.some((event) => event.event === 'record' && (JSON.parse(event.data) as { key: string }).key === 'k5'), 5_000);
  stream.close();
}, 30_000);

it('a long poll behind a head the database no longer has waits for the next write instead of answering at once', async () => {
  const node = await nodeAheadOfItsDatabase();

  // Without a write, it waits out its `wait` as at the head, then names the same position; it
  // waits, not reads again and again (the node's CPU over the 2 s: a loop of reads takes most of it).
  const started = Date.now();
  const cpuBefore = processSeconds(node.proc.pid!);
  const empty = await http(node.url, 'GET', '/v1/changes?after=2&wait=2');
  const cpu = processSeconds(node.proc.pid!) - cpuBefore;
  expect(empty.status).toBe(200);
  expect(empty.body.records).toEqual([]);
  expect(empty.body.next).toBe(2);
  expect(Date.now() - started).toBeGreaterThanOrEqual(1_900);
  expect(cpu).toBeLessThan(0.4);

  // A write while it waits: the poll answers with it.
  const poll = http(node.url, 'GET', '/v1/changes?after=2&wait=10');
  await new Promise((resolve) => setTimeout(resolve, 300));
  expect((await http(node.url, 'PUT', '/v1/keys/k5', { value: 5 })).status).toBe(200);
  const answered = await poll;
  expect(answered.status).toBe(200);
  expect(answered.body.records.map((record: { key: string }) => record.key)).toEqual(['k5']);
}, 30_000);

it('a watch following by long poll goes on under the generation its first page began, without a reset', async () => {
  f = await fixture();
  const node = await f.spawn();
  expect((await http(node.url, 'POST', '/v1/records', { records: [{ key: 'k1', value: 1 }, { key: 'k2', value: 2 }] })).status).toBe(200);
  // The reader holds offsets up to 2, of the log's only generation so far (which no Link names).
  const page = await http(node.url, 'GET', '/v1/changes?after=0');
  expect(page.body.next).toBe(2);
  expect(page.headers.get('link')).not.toContain('gen=');

  // The next write is the first of a new generation (the meta row names another timeline), made
  // while the reader is away: its first page on resuming is served under the new generation.
  const db = await f.connect();
  await db.query(`UPDATE meta SET timeline = 'FFFFFFFF' WHERE id = 1`);
  expect((await http(node.url, 'PUT', '/v1/keys/k3', { value: 3 })).status).toBe(200);

  const stop = new AbortController();
  const keys: string[] = [];
  const watching = (async () => {
    for await (const event of new StatelogClient({ url: node.url }).watch({ after: 2, follow: 'changes', signal: stop.signal })) {
      if (event.type === 'record') keys.push(event.record.key);
      if (keys.includes('k4')) return;
    }
  })();
  await new Promise((resolve) => setTimeout(resolve, 300));
  expect((await http(node.url, 'PUT', '/v1/keys/k4', { value: 4 })).status).toBe(200);
  await Promise.race([watching, new Promise((_, reject) => setTimeout(() => reject(new Error(`the watch got ${keys.join(', ')}`)), 10_000))]);
  stop.abort();
  expect(keys).toEqual(['k3', 'k4']);
}, 30_000);
