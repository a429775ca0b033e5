// StateMirror against a live server: it converges under random writes and compactions,
// survives a server restart, starts over on a 410, and restarts from its checkpoint.
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { buildApp, type App } from '../src/app.js';
import { StateMirror, StatelogClient, type ResetEvent } from '@statelog/client';
import { startApp, tempDir, type TestApp } from './support/helpers.js';

let t: TestApp | undefined;
let mirrors: StateMirror[] = [];
let extraApps: App[] = [];
afterEach(async () => {
  for (const mirror of mirrors) await mirror.close();
  mirrors = [];
  for (const app of extraApps) await app.close();
  extraApps = [];
  await t?.close();
  t = undefined;
});

const urlOf = (app: App) => `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;

function mirrorOf(url: string, options: Partial<ConstructorParameters<typeof StateMirror>[0]> = {}): StateMirror {
  const warnings: string[] = [];
  const mirror = new StateMirror({ url, retry: { baseDelayMs: 10, maxDelayMs: 100 }, warn: (m) => warnings.push(m), ...options });
  mirrors.push(mirror);
  return mirror;
}

async function snapshotMap(client: StatelogClient, prefix = ''): Promise<{ map: Map<string, unknown>; offset: number }> {
  const snapshot = await client.snapshot({ prefix });
  const map = new Map<string, unknown>();
  for await (const entry of snapshot) map.set(entry.key, entry.value);
  return { map, offset: snapshot.offset };
}

/** Waits until the mirror has applied everything up to the server's head now. */
async function caughtUp(mirror: StateMirror, client: StatelogClient): Promise<void> {
  const { head } = (await client.stats()) as { head: number };
  const deadline = Date.now() + 10_000;
  while (mirror.offset < head) {
    if (Date.now() > deadline) throw new Error(`mirror at ${mirror.offset}, head ${head}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** A mirror that caught up with the server, wrote its checkpoint and closed. */
async function mirrorLeftAt(url: string, checkpoint: string, client: StatelogClient): Promise<StateMirror> {
  const mirror = mirrorOf(url, { checkpoint });
  await mirror.ready;
  await caughtUp(mirror, client);
  await mirror.close();
  mirrors = mirrors.filter((m) => m !== mirror);
  return mirror;
}

async function expectConverged(mirror: StateMirror, client: StatelogClient, prefix = ''): Promise<void> {
  await caughtUp(mirror, client);
  const { map } = await snapshotMap(client, prefix);
  expect(new Map(mirror.entries())).toEqual(map);
}

type Step = { op: 'set'; key: number; value: number } | { op: 'delete'; key: number } | { op: 'incr'; key: number } | { op: 'compact' };

const stepArb: fc.Arbitrary<Step> = fc.oneof(
  { weight: 5, arbitrary: fc.record({ op: fc.constant('set' as const), key: fc.nat(15), value: fc.integer() }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('delete' as const), key: fc.nat(15) }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('incr' as const), key: fc.nat(15) }) },
  { weight: 1, arbitrary: fc.constant({ op: 'compact' as const }) },
);

async function apply(client: StatelogClient, step: Step): Promise<void> {
  const key = 'key' in step ? `k${step.key}` : '';
  if (step.op === 'set') await client.put(key, step.value);
  else if (step.op === 'delete') await client.delete(key).catch(() => {});
  else if (step.op === 'incr') await client.incr(key, 1).catch(() => {});
  else await client.compact();
}

describe('StateMirror', () => {
  it('converges to the server under random writes and compactions', async () => {
    t = await startApp({ STATELOG_TOMBSTONE_RETENTION_MS: '0' });
    const client = new StatelogClient({ url: urlOf(t.app) });
    await fc.assert(
      fc.asyncProperty(fc.array(stepArb, { minLength: 1, maxLength: 30 }), fc.array(stepArb, { maxLength: 30 }), async (before, after) => {
        for (const step of before) await apply(client, step);
        const mirror = mirrorOf(urlOf(t!.app));
        await mirror.ready;
        for (const step of after) await apply(client, step);
        await expectConverged(mirror, client);
        await mirror.close();
        mirrors = mirrors.filter((m) => m !== mirror);
      }),
      { numRuns: Number(process.env.FC_RUNS ?? 25) },
    );
  });

  it('follows only its prefix and emits a change per record', async () => {
    t = await startApp();
    const client = new StatelogClient({ url: urlOf(t.app) });
    await client.put('users/1', 'a');
    await client.put('orders/1', 'x');
    const mirror = mirrorOf(urlOf(t.app), { prefix: 'users/' });
    const changes: string[] = [];
    mirror.on('change', (record: { key: string; op: string }) => changes.push(`${record.op} ${record.key}`));
    await mirror.ready;
    expect([...mirror.keys()]).toEqual(['users/1']);
    await client.put('users/2', 'b');
    await client.put('orders/2', 'y');
    await client.delete('users/1');
    await expectConverged(mirror, client, 'users/');
    expect(changes).toEqual(['set users/2', 'delete users/1']);
    expect(mirror.get('users/2')).toBe('b');
    expect(mirror.size).toBe(1);
  });

  it('reconnects after a server restart and resumes from its offset without a reset', async () => {
    const dir = tempDir();
    t = await startApp({}, { dir });
    const port = (t.app.server.address() as { port: number }).port;
    const url = urlOf(t.app);
    const client = new StatelogClient({ url, retry: { baseDelayMs: 20 } });
    for (let i = 0; i < 20; i++) await client.put(`k${i}`, i);
    const mirror = mirrorOf(url);
    const resets: ResetEvent[] = [];
    mirror.on('reset', (event: ResetEvent) => resets.push(event));
    await mirror.ready;

    // The same database and settings, a new app on the same port.
    const config = t.app.services.config;
    await t.app.close();
    const app = await buildApp(config);
    extraApps.push(app);
    await app.listen({ port, host: '127.0.0.1' });
    for (let i = 0; i < 20; i++) await client.put(`k${i}`, i * 10);
    await client.delete('k0');
    await expectConverged(mirror, client);
    expect(resets).toEqual([]);
  });

  it('starts over with a reset when its offset is compacted away while it is offline', async () => {
    const dir = tempDir();
    t = await startApp({ STATELOG_TOMBSTONE_RETENTION_MS: '0' }, { dir });
    const url = urlOf(t.app);
    const client = new StatelogClient({ url });
    for (let i = 0; i < 10; i++) await client.put(`k${i}`, i);
    const checkpoint = join(dir, 'mirror.checkpoint');
    const first = await mirrorLeftAt(url, checkpoint, client);

    // While it is away: deletes whose markers compaction removes, moving the horizon past it.
    for (let i = 0; i < 5; i++) await client.delete(`k${i}`);
    await client.put('k9', 'new');
    const compacted = (await client.compact()) as { horizon: number };
    expect(compacted.horizon).toBeGreaterThan(first.offset);

    const warnings: string[] = [];
    const second = mirrorOf(url, { checkpoint, warn: (m) => warnings.push(m) });
    const resets: ResetEvent[] = [];
    second.on('reset', (event: ResetEvent) => resets.push(event));
    await second.ready;
    await expectConverged(second, client);
    expect(resets).toEqual([{ reason: 'offset_compacted' }]);
    expect(second.has('k0')).toBe(false);
  });

  it('restarts from its checkpoint reading only changes, and ignores a corrupt checkpoint', async () => {
    const dir = tempDir();
    let snapshotsTaken = 0;
    t = await startApp({}, {
      dir,
      prepare: (app) => {
        app.addHook('onRequest', async (req) => {
          // The mirror's snapshots (with minOffset), not the test's own (plain) ones.
          if ((req.url.startsWith('/v1/snapshot') && req.url.includes('minOffset=')) || (req.url.startsWith('/v1/changes/stream') && req.url.includes('snapshot=true'))) snapshotsTaken++;
        });
      },
    });
    const url = urlOf(t.app);
    const client = new StatelogClient({ url });
    for (let i = 0; i < 50; i++) await client.put(`k${i}`, { n: i });
    const checkpoint = join(dir, 'mirror.checkpoint');
    await mirrorLeftAt(url, checkpoint, client);
    expect(snapshotsTaken).toBe(1);

    await client.put('k1', 'changed while away');
    const second = mirrorOf(url, { checkpoint });
    await second.ready;
    expect(second.size).toBe(50);
    await expectConverged(second, client);
    expect(second.get('k1')).toBe('changed while away');
    expect(snapshotsTaken).toBe(1);
    await second.close();
    mirrors = [];

    // A truncated checkpoint is detected, reported, and replaced by a fresh snapshot.
    const saved = readFileSync(checkpoint, 'utf8');
    writeFileSync(checkpoint, saved.slice(0, saved.length - 20));
    const warnings: string[] = [];
    const third = mirrorOf(url, { checkpoint, warn: (m) => warnings.push(m) });
    await third.ready;
    await expectConverged(third, client);
    expect(snapshotsTaken).toBe(2);
    expect(warnings.some((w) => /corrupt or truncated/.test(w))).toBe(true);
  });

  it('saves its digest in the checkpoint and restarts from it without hashing the keys again', async () => {
    const dir = tempDir();
    t = await startApp({}, { dir });
    const url = urlOf(t.app);
    const client = new StatelogClient({ url });
    for (let i = 0; i < 20; i++) await client.put(`k${i}`, i);
    const checkpoint = join(dir, 'mirror.checkpoint');
    const first = await mirrorLeftAt(url, checkpoint, client);
    const [, body] = readFileSync(checkpoint, 'utf8').split(/\n(.*)/s) as [string, string];
    const saved = JSON.parse(body) as { digest?: string; offsets?: number[] };
    expect(saved.digest).toBe(first.digest);
    // A checkpoint is rewritten with a valid checksum, as the mirror would have written it.
    const rewrite = (data: object): void => {
      const text = JSON.stringify(data);
      writeFileSync(checkpoint, `${createHash('sha256').update(text).digest('hex')}\n${text}`);
    };

    // The saved digest is what the restarted mirror starts from: a different one shows through.
    rewrite({ ...saved, digest: '0123456789abcdef' });
    const trusting = mirrorOf(url, { checkpoint });
    await trusting.ready;
    expect(trusting.digest).toBe('0123456789abcdef');
    await trusting.close();
    mirrors = [];

    // A checkpoint saved without a digest (an older client) has it computed from its offsets.
    const older = { ...saved };
    delete older.digest;
    rewrite(older);
    const computing = mirrorOf(url, { checkpoint });
    await computing.ready;
    expect(computing.digest).toBe(first.digest);
    expect((await computing.verify()).ok).toBe(true);
  });

  it('drops a key at its expiry without waiting for the tombstone, keeps it in the digest until then, and across a checkpoint', async () => {
    const dir = tempDir();
    t = await startApp({ STATELOG_EXPIRY_INTERVAL_MS: '0' }, { dir });
    const url = urlOf(t.app);
    const client = new StatelogClient({ url });
    try {
      // One key with a TTL in the mirror's snapshot, one learnt from the change stream.
      await client.put('from-snapshot', 1, { ttlMs: 1500 });
      await client.put('forever', 0);
      const checkpoint = join(dir, 'mirror.checkpoint');
      const mirror = mirrorOf(url, { checkpoint });
      const expired: string[] = [];
      mirror.on('expire', (key) => expired.push(key));
      await mirror.ready;
      await client.put('from-changes', 2, { ttlMs: 1500 });
      await caughtUp(mirror, client);
      expect(mirror.size).toBe(3);
      const latest = Math.max(...['from-snapshot', 'from-changes'].map((key) => mirror.expiresAt(key)!));
      expect(latest).toBe((await client.get('from-changes'))!.expiresAt);
      await sleep(latest - Date.now() + 50);
      // No tombstone yet (the expirer is off): the mirror agrees with GET all the same.
      expect(await client.get('from-changes')).toBeNull();
      expect(mirror.get('from-snapshot')).toBeUndefined();
      expect(mirror.has('from-changes')).toBe(false);
      expect([...mirror.keys()]).toEqual(['forever']);
      expect(mirror.size).toBe(1);
      expect(expired.sort()).toEqual(['from-changes', 'from-snapshot']);
      expect((await mirror.verify()).ok).toBe(true);

      // A restart from the checkpoint keeps the expiries (and the digest whole).
      await mirror.close();
      mirrors = [];
      const restarted = mirrorOf(url, { checkpoint });
      await restarted.ready;
      expect([...restarted.keys()]).toEqual(['forever']);
      expect(await t.app.services.expirer.run()).toBe(2);
      await caughtUp(restarted, client);
      expect((await restarted.verify()).ok).toBe(true);
      expect(restarted.size).toBe(1);
    } finally {
      await client.close();
    }
  });
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));
