// Expiries with two statelog nodes on one PostgreSQL database: both expirers find the
// same due keys, and for each exactly one tombstone is written (the other node's
// conditional delete fails): none lost, none doubled. The digest stays that of the state.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { digestHex, digestOf } from '../../src/contract/digest.js';
import { fixture, http, NO_SHEDDING, type Fixture } from './fixtures.js';

let f: Fixture | undefined;
afterEach(async () => {
  await f?.cleanup();
  f = undefined;
});

describe('TTL on several nodes', () => {
  it('writes exactly one tombstone per expiry', async () => {
    f = await fixture();
    const env = { ...NO_SHEDDING, STATELOG_EXPIRY_INTERVAL_MS: '20' };
    const [a, b] = await Promise.all([f.spawn(env), f.spawn(env)]);
    const keys = Array.from({ length: 400 }, (_, i) => `e${i}`);
    // Written through both nodes, expiring together.
    for (let i = 0; i < keys.length; i += 100) {
      const node = i % 200 === 0 ? a : b;
      const records = keys.slice(i, i + 100).map((key) => ({ key, value: i, ttlMs: 600 }));
      expect((await http(node.url, 'POST', '/v1/records', { records })).status).toBe(200);
    }
    await vi.waitFor(async () => expect((await http(a.url, 'GET', '/v1/stats')).body.liveKeys).toBe(0), { timeout: 30_000, interval: 100 });
    // Both nodes keep polling for a while: nothing more may be written.
    await new Promise((resolve) => setTimeout(resolve, 300));
    const changes = await http(b.url, 'GET', '/v1/changes?after=0&limit=10000');
    const deletes = (changes.body.records as { key: string; op: string }[]).filter((r) => r.op === 'delete').map((r) => r.key);
    expect(deletes.length).toBe(keys.length);
    expect(new Set(deletes).size).toBe(keys.length);
    const stats = (await http(a.url, 'GET', '/v1/stats')).body;
    expect(stats).toMatchObject({ head: 2 * keys.length, liveKeys: 0, tombstones: keys.length, digest: digestHex(digestOf([])) });
  });
});
