// Expiries and the digest live in the database: a real server killed with SIGKILL while
// keys are pending expiry, restarted on the same database, still deletes each of them
// exactly once, and its digest is still the digest of its state.
import { describe, expect, it, vi } from 'vitest';
import { digestHex, digestOf } from '../src/contract/digest.js';
import { childServers } from './support/child-server.js';

const servers = childServers({ STATELOG_EXPIRY_INTERVAL_MS: '50' });

const post = (url: string, records: unknown[]) =>
  fetch(`${url}/v1/records`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ records }) });

async function stateDigest(url: string): Promise<{ stats: { digest: string; digestOffset: number; liveKeys: number; head: number }; computed: string }> {
  const text = await (await fetch(`${url}/v1/snapshot`)).text();
  const lines = text.trim().split('\n').map((line) => JSON.parse(line) as { key: string; offset: number; end?: true; digest?: string });
  const trailer = lines.pop()!;
  const stats = (await (await fetch(`${url}/v1/stats`)).json()) as { digest: string; digestOffset: number; liveKeys: number; head: number };
  expect(trailer.digest).toBe(digestHex(digestOf(lines)));
  return { stats, computed: digestHex(digestOf(lines)) };
}

describe('TTL and digest across kill -9', () => {
  it('deletes every pending expiry once after a restart, and keeps the digest right', async () => {
    let server = await servers.start();
    // Far enough ahead that none expires before the kill on a busy machine (the kill
    // follows within a second or two), near enough that the wait after the restart is short.
    const records = Array.from({ length: 40 }, (_, i) => ({ key: `t${i}`, value: i, ttlMs: 8_000 }));
    expect((await post(server.url, records)).status).toBe(200);
    expect((await post(server.url, [{ key: 'keep', value: 'x' }, { key: 't0', value: 'rewritten' }])).status).toBe(200);
    const before = await stateDigest(server.url);
    expect(before.stats.digest).toBe(before.computed);
    // Every expiry is still pending at the kill: the restarted server has them all to do.
    expect(before.stats.liveKeys).toBe(41);
    await servers.kill(server);

    server = await servers.start();
    const again = await stateDigest(server.url);
    expect(again.stats).toMatchObject({ digest: before.stats.digest, head: before.stats.head });
    // liveKeys leaves an expired key out at once; expiredKeys counts it until its delete is written.
    await vi.waitFor(
      async () =>
        expect((await (await fetch(`${server.url}/v1/stats`)).json()) as { liveKeys: number; expiredKeys: number }).toMatchObject({ liveKeys: 2, expiredKeys: 0 }),
      { timeout: 60_000, interval: 100 },
    );
    const changes = (await (await fetch(`${server.url}/v1/changes?after=0&limit=1000`)).json()) as { records: { key: string; op: string }[] };
    const deletes = changes.records.filter((r) => r.op === 'delete').map((r) => r.key).sort();
    expect(deletes).toEqual(records.map((r) => r.key).filter((k) => k !== 't0').sort());
    const after = await stateDigest(server.url);
    expect(after.stats.digest).toBe(after.computed);
    expect(after.stats.digestOffset).toBe(after.stats.head);
  }, 120_000);
});
