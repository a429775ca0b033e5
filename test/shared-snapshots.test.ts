// Snapshots shared at the origin: concurrent requests share one read of the store, a
// request never gets a state older than the head when it arrived, and `minOffset`
// answers are built for HTTP caches (Cache-Control, ETag, 304).
import http from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { startApp, type TestApp } from './support/helpers.js';
import { baseUrl, readSnapshot, SseClient, writeBatch } from './support/stream-clients.js';

const KEYS = 30_000;
const PAD = 'p'.repeat(200);

let t: TestApp | undefined;
afterEach(async () => {
  await t?.close();
  t = undefined;
});

async function start(env: Record<string, string> = {}): Promise<string> {
  t = await startApp(
    { STATELOG_SYNC: 'normal', ...env },
    { seed: (database) => database.seedLiveKeys({ count: KEYS, value: (i) => JSON.stringify({ n: i, pad: PAD }) }) },
  );
  return baseUrl(t.app);
}

/** A counter's value from /metrics (the sum of its series matching `labels`). */
async function metric(base: string, name: string, labels = ''): Promise<number> {
  const text = await (await fetch(`${base}/metrics`, { headers: { authorization: 'Bearer admin-secret' } })).text();
  return text
    .split('\n')
    .filter((line) => line.startsWith(`${name}${labels ? `{${labels}}` : ''} `) || (labels === '' && line.startsWith(`${name}{`)))
    .reduce((sum, line) => sum + Number(line.split(' ').at(-1)), 0);
}

const reads = (base: string) => metric(base, 'statelog_snapshot_reads_total');

/** A snapshot request whose answer has started but is not read: its spool stays open. */
function heldSnapshot(url: string): Promise<{ offset: number; res: http.IncomingMessage }> {
  return new Promise((resolve, reject) => {
    http
      .get(url, (res) => {
        res.pause();
        resolve({ offset: Number(res.headers['x-log-offset']), res });
      })
      .on('error', reject);
  });
}

describe('shared snapshots', () => {
  it('serve every concurrent request from one read of the store, each whole with its trailer', async () => {
    const base = await start();
    const before = await reads(base);
    const snapshots = await Promise.all(Array.from({ length: 12 }, (_, i) => readSnapshot(base, '', i % 3 === 0 ? 1 : 0)));
    expect(await reads(base)).toBe(before + 1);
    for (const snapshot of snapshots) {
      expect(snapshot.entries).toHaveLength(KEYS);
      expect(snapshot.trailer).toEqual(snapshots[0]!.trailer);
    }
    expect(await metric(base, 'statelog_snapshots_served_total', 'from="shared"')).toBe(11);
  });

  it('never answer a request with a state older than the head when it arrived', async () => {
    const base = await start();
    const first = await heldSnapshot(`${base}/v1/snapshot`);
    const head = (await writeBatch(base, [{ key: 'late', value: 1 }])).body.offset;
    expect(head).toBeGreaterThan(first.offset);
    const second = await readSnapshot(base);
    expect(second.offset).toBeGreaterThanOrEqual(head);
    expect(second.entries.some((entry) => entry.key === 'late')).toBe(true);
    first.res.destroy();
  });

  it('serve minOffset from a recent state, with Cache-Control and an ETag, and 304 for a state the client holds', async () => {
    const base = await start();
    const plain = await fetch(`${base}/v1/snapshot`);
    expect(plain.headers.get('cache-control')).toBe('no-store');
    const offset = Number(plain.headers.get('x-log-offset'));
    const epoch = plain.headers.get('x-log-epoch');
    const etag = plain.headers.get('etag');
    expect(etag).toBe(`"${epoch}:${offset}"`);
    await plain.text();
    await writeBatch(base, [{ key: 'after', value: 1 }]);

    const readsBefore = await reads(base);
    const cached = await fetch(`${base}/v1/snapshot?minOffset=${offset}`);
    expect(cached.status).toBe(200);
    expect(cached.headers.get('cache-control')).toBe('public, max-age=10');
    expect(cached.headers.get('etag')).toBe(etag);
    expect((await cached.text()).trim().split('\n')).toHaveLength(KEYS + 1);
    expect(await reads(base)).toBe(readsBefore);

    const notModified = await fetch(`${base}/v1/snapshot?minOffset=${offset}`, { headers: { 'if-none-match': etag! } });
    expect(notModified.status).toBe(304);
    expect(notModified.headers.get('etag')).toBe(etag);
    // The plain snapshot asks for the latest state: the one held is no longer it.
    const stale = await fetch(`${base}/v1/snapshot`, { headers: { 'if-none-match': etag! } });
    expect(stale.status).toBe(200);
    expect(Number(stale.headers.get('x-log-offset'))).toBeGreaterThan(offset);
    await stale.text();
    // Another epoch's tag names no state of this log.
    const other = await fetch(`${base}/v1/snapshot?minOffset=${offset}`, { headers: { 'if-none-match': `"${'0'.repeat(32)}:${offset}"` } });
    expect(other.status).toBe(200);
    await other.text();
    expect(await metric(base, 'statelog_snapshots_served_total', 'from="not_modified"')).toBe(1);
    expect(await reads(base)).toBe(readsBefore + 1);
  });

  it('never answer minOffset with a state below the compaction horizon, which no reader could follow', async () => {
    const base = await start();
    const kept = await fetch(`${base}/v1/snapshot?minOffset=0`);
    const keptOffset = Number(kept.headers.get('x-log-offset'));
    await kept.text();
    // A delete compacted away after that state: changes after it can no longer be read.
    expect((await writeBatch(base, [{ key: 'gone', value: 1 }, { key: 'gone', op: 'delete' }, { key: 'later', value: 1 }])).status).toBe(200);
    const horizon = keptOffset + 2;
    await t!.database.setHorizon(horizon);
    expect((await fetch(`${base}/v1/changes?after=${keptOffset}`)).status).toBe(410);

    const answer = await fetch(`${base}/v1/snapshot?minOffset=0`);
    expect(Number(answer.headers.get('x-log-offset'))).toBeGreaterThanOrEqual(horizon);
    const lines = (await answer.text()).trim().split('\n');
    expect(lines.some((line) => line.startsWith('{"key":"later"'))).toBe(true);
    const offset = Number(answer.headers.get('x-log-offset'));
    expect((await fetch(`${base}/v1/changes?after=${offset}`)).status).toBe(200);
  });

  it('refuse a minOffset beyond the head (410 offset_ahead) or not a number (400)', async () => {
    const base = await start();
    const ahead = await fetch(`${base}/v1/snapshot?minOffset=${KEYS + 5}`);
    expect(ahead.status).toBe(410);
    expect(await ahead.json()).toMatchObject({ error: { code: 'offset_ahead' } });
    expect((await fetch(`${base}/v1/snapshot?minOffset=x`)).status).toBe(400);
  });

  it('mark minOffset answers private when tokens are set', async () => {
    const base = await start({ STATELOG_TOKENS: 'admin:admin-secret' });
    const res = await fetch(`${base}/v1/snapshot?minOffset=0`, { headers: { authorization: 'Bearer admin-secret' } });
    expect(res.status).toBe(200);
    expect(res.headers.get('cache-control')).toBe('private, max-age=10');
    await res.text();
  });

  it('share one read among snapshot=true streams too', async () => {
    const base = await start();
    const before = await reads(base);
    const streams = await Promise.all(Array.from({ length: 6 }, () => SseClient.connect(`${base}/v1/changes/stream?snapshot=true`)));
    try {
      for (const stream of streams) await stream.until((events) => events.some((event) => event.event === 'snapshot-end'), 20_000);
      expect(await reads(base)).toBe(before + 1);
      const ends = streams.map((stream) => stream.named('snapshot-end')[0]!.data);
      expect(new Set(ends).size).toBe(1);
      expect(streams.map((stream) => stream.named('record').length)).toEqual(streams.map(() => KEYS));
    } finally {
      for (const stream of streams) stream.close();
    }
  });
});
