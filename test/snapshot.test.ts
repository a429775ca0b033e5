import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { digestHex, digestOf } from '../src/contract/digest.js';
import { startApp, type TestApp } from './support/helpers.js';
import { RandomWriter } from './support/random-writer.js';
import { applyRecords, baseUrl, plain, readAllChanges, readSnapshot, stateOf, writeBatch, type ErrorBody } from './support/stream-clients.js';

let t: TestApp;
let base: string;
beforeEach(async () => {
  t = await startApp({ STATELOG_SYNC: 'normal' });
  base = baseUrl(t.app);
});
afterEach(async () => {
  await t.close();
});

const byteOrder = (a: string, b: string): number => Buffer.compare(Buffer.from(a), Buffer.from(b));

describe('GET /v1/snapshot', () => {
  it('streams every live key in byte order as NDJSON, then the end line with offset, count and epoch', async () => {
    const keys = ['z', 'a/b', 'é', 'Z', '\u{1F600}', 'a b', 'ﬀ'];
    await writeBatch(base, keys.map((key, i) => ({ key, value: { i } })));
    await writeBatch(base, [{ key: 'a b', op: 'delete' }, { key: 'z', value: [1, 'two', null] }]);

    const res = await fetch(`${base}/v1/snapshot`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/x-ndjson/);
    const epoch = res.headers.get('x-log-epoch');
    expect(epoch).toMatch(/^[0-9a-f]{32}$/);
    expect(res.headers.get('x-log-offset')).toBe('9');

    const lines = (await res.text()).split('\n');
    expect(lines.pop()).toBe('');
    const trailer = JSON.parse(lines.pop()!);
    const entries = lines.map((line) => JSON.parse(line));
    expect(trailer).toEqual({ end: true, offset: 9, count: 6, epoch, digest: digestHex(digestOf(entries)) });
    expect(trailer.digest).toBe(((await (await fetch(`${base}/v1/stats`)).json()) as { digest: string }).digest);
    const expectedKeys = keys.filter((k) => k !== 'a b').sort(byteOrder);
    expect(entries.map((e) => e.key)).toEqual(expectedKeys);
    expect(entries.find((e) => e.key === 'z')).toMatchObject({ value: [1, 'two', null], offset: 9 });
    expect(entries.find((e) => e.key === 'é')).toMatchObject({ value: { i: 2 }, offset: 3 });
    for (const entry of entries) expect(Object.keys(entry)).toEqual(['key', 'value', 'offset', 'ts']);
  });

  it('keeps only the keys with the prefix, at the head offset', async () => {
    await writeBatch(base, [{ key: 'a/1', value: 1 }, { key: 'a/2', value: 2 }, { key: 'ab', value: 3 }, { key: 'b/1', value: 4 }]);
    const snapshot = await readSnapshot(base, 'a/');
    expect(snapshot.entries.map((e) => e.key)).toEqual(['a/1', 'a/2']);
    // The digest of the keys it sent, not of the whole state.
    expect(snapshot.trailer).toMatchObject({ offset: 4, count: 2, digest: digestHex(digestOf(snapshot.entries)) });
    expect(snapshot.offset).toBe(4);
  });

  it('answers an empty log with only the end line at offset 0', async () => {
    const snapshot = await readSnapshot(base);
    expect(snapshot.entries).toEqual([]);
    expect(snapshot.trailer).toEqual({ end: true, offset: 0, count: 0, epoch: snapshot.epoch, digest: '0000000000000000' });
  });

  it('refuses a bad prefix or an unknown parameter with 400 invalid_request', async () => {
    for (const query of ['prefix=%01', 'limit=5', 'prefix=a&prefix=b']) {
      const res = await fetch(`${base}/v1/snapshot?${query}`);
      expect(res.status, query).toBe(400);
      expect(((await res.json()) as ErrorBody).error.code, query).toBe('invalid_request');
    }
  });
});

describe('snapshot consistency under a concurrent writer', () => {
  it('each snapshot is the state at its offset, and with the changes after it equals the final state', async () => {
    // Long keys, and more of them than socket buffers and pages hold, read slowly: the
    // server has to wait for the socket between pages while commits go on.
    const writer = new RandomWriter(base, (i) => `k${i}/${'p'.repeat(300)}`, 20_000);
    await writer.fill();
    writer.start();
    const snapshots = [];
    for (let i = 0; i < 4; i++) {
      await new Promise((resolve) => setTimeout(resolve, 30));
      snapshots.push(await readSnapshot(base, '', 1));
    }
    await writer.stop();

    expect(writer.offsets).toEqual(Array.from({ length: writer.head }, (_, i) => i + 1));
    expect(new Set(snapshots.map((s) => s.offset)).size).toBe(snapshots.length);
    for (const snapshot of snapshots) {
      expect(snapshot.trailer).toMatchObject({ end: true, offset: snapshot.offset, count: snapshot.entries.length });
      expect(plain(stateOf(snapshot.entries))).toEqual(plain(writer.stateAt(snapshot.offset)));
      const changes = await readAllChanges(base, snapshot.offset, '', 97);
      expect(plain(applyRecords(stateOf(snapshot.entries), changes))).toEqual(plain(writer.stateAt(writer.head)));
    }
  });
});
