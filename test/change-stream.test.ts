import type { Socket } from 'node:net';
import { EventSource } from 'eventsource';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { digestHex, digestOf } from '../src/contract/digest.js';
import { startApp, type TestApp } from './support/helpers.js';
import { RandomWriter } from './support/random-writer.js';
import {
  applyRecords,
  baseUrl,
  plain,
  readAllChanges,
  readSnapshot,
  SseClient,
  stateOf,
  writeBatch,
  type SseEvent,
  type State,
  type WireRecord,
} from './support/stream-clients.js';

let t: TestApp;
let base: string;
/** Every connection the server accepted, to cut them as a failing network would. */
let sockets: Set<Socket>;
beforeEach(async () => {
  t = await startApp({ STATELOG_SYNC: 'normal' });
  base = baseUrl(t.app);
  sockets = new Set();
  t.app.server.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
});
afterEach(async () => {
  // Every client is closed by now, but an aborted fetch (EventSource.close()) leaves
  // undici a spare connection that never sends a request, and Node's server.close()
  // waits for such a socket: drop them.
  dropConnections();
  await t.close();
});

function dropConnections(): void {
  for (const socket of sockets) socket.destroy();
}

/**
 * Cuts every connection as a failing network would, and gives the clients a moment to
 * see it: the test's own writer must not reuse a keep-alive connection already cut.
 */
async function cutConnections(): Promise<void> {
  dropConnections();
  await new Promise((resolve) => setTimeout(resolve, 20));
}

const streamUrl = (query = ''): string => `${base}/v1/changes/stream?${query}`;
const lastId = (events: SseEvent[]): number => Number(events.filter((e) => e.id !== undefined).at(-1)?.id ?? -1);
const put = (key: string, value: unknown) => writeBatch(base, [{ key, value }]);

/** Moves the horizon as a compactor that removed a tombstone at `horizon` would. */
const setHorizon = (horizon: number) => t.database.setHorizon(horizon);

describe('GET /v1/changes/stream, parsed by hand', () => {
  it('sends records as id/event/data and progress when the prefix skipped records', async () => {
    await put('a/1', 1);
    await put('b/1', 2);
    const stream = await SseClient.connect(streamUrl('after=0&prefix=a/'));
    expect(stream.response.headers['content-type']).toMatch(/^text\/event-stream/);
    expect(stream.response.headers['x-log-epoch']).toBe(t.app.services.store.epoch);
    await stream.until((events) => lastId(events) === 2);
    expect(stream.retry).toBe(1000);
    expect(stream.events).toEqual([
      { id: '1', event: 'record', data: expect.any(String) },
      { id: '2', event: 'progress', data: '{"offset":2}' },
    ]);
    expect(JSON.parse(stream.events[0]!.data)).toEqual({ offset: 1, key: 'a/1', op: 'set', value: 1, ts: expect.any(Number) });

    await put('b/2', 3);
    await stream.until((events) => lastId(events) === 3);
    expect(stream.events.at(-1)).toEqual({ id: '3', event: 'progress', data: '{"offset":3}' });
    await writeBatch(base, [{ key: 'a/1', op: 'delete' }]);
    await stream.until((events) => lastId(events) === 4);
    expect(stream.events.at(-1)).toMatchObject({ id: '4', event: 'record' });
    expect(JSON.parse(stream.events.at(-1)!.data)).toEqual({ offset: 4, key: 'a/1', op: 'delete', ts: expect.any(Number) });
    stream.close();
  });

  it('resumes after Last-Event-ID, which overrides after, with no gap and no duplicate', async () => {
    await writeBatch(base, Array.from({ length: 10 }, (_, i) => ({ key: `k${i}`, value: i })));
    const first = await SseClient.connect(streamUrl('after=0'));
    await first.until((events) => lastId(events) === 10);
    first.close();
    await writeBatch(base, Array.from({ length: 5 }, (_, i) => ({ key: `k${i}`, value: -i })));

    const resumed = await SseClient.connect(streamUrl('after=0'), { 'last-event-id': '7' });
    await resumed.until((events) => lastId(events) === 15);
    expect(resumed.records().map((r) => r.offset)).toEqual([8, 9, 10, 11, 12, 13, 14, 15]);
    resumed.close();
  });

  it('with snapshot=true, equals a plain snapshot plus changes, under a concurrent writer', async () => {
    const writer = new RandomWriter(base, (i) => `k/${i}`, 2500);
    await writer.fill();
    writer.start();
    const stream = await SseClient.connect(streamUrl('snapshot=true'));
    await new Promise((resolve) => setTimeout(resolve, 100));
    const plainSnapshot = await readSnapshot(base);
    await new Promise((resolve) => setTimeout(resolve, 100));
    await writer.stop();
    await stream.until((events) => lastId(events) === writer.head, 10_000);
    stream.close();

    const end = stream.events.findIndex((e) => e.event === 'snapshot-end');
    const snapshotPart = stream.events.slice(0, end);
    const s = Number(stream.events[end]!.id);
    // The snapshot part: every live key at S, once, without ids, as sets.
    expect(snapshotPart.every((e) => e.event === 'record' && e.id === undefined)).toBe(true);
    const snapshotRecords = snapshotPart.map((e) => JSON.parse(e.data) as WireRecord);
    // snapshot-end carries the digest of the keys sent.
    expect(JSON.parse(stream.events[end]!.data)).toEqual({ offset: s, epoch: t.app.services.store.epoch, digest: digestHex(digestOf(snapshotRecords)) });
    expect(snapshotRecords.every((r) => r.op === 'set' && r.offset <= s)).toBe(true);
    expect(plain(applyRecords(new Map(), snapshotRecords))).toEqual(plain(writer.stateAt(s)));
    // Then live records after S: ids strictly increasing, each the record's offset.
    const live = stream.events.slice(end + 1).filter((e) => e.event === 'record');
    const liveOffsets = live.map((e) => (JSON.parse(e.data) as WireRecord).offset);
    expect(live.map((e) => Number(e.id))).toEqual(liveOffsets);
    expect(liveOffsets.every((o, i) => o > (i === 0 ? s : liveOffsets[i - 1]!))).toBe(true);

    const fromStream: State = applyRecords(new Map(), [...snapshotRecords, ...live.map((e) => JSON.parse(e.data) as WireRecord)]);
    const fromPlain = applyRecords(stateOf(plainSnapshot.entries), await readAllChanges(base, plainSnapshot.offset));
    expect(plain(fromStream)).toEqual(plain(writer.stateAt(writer.head)));
    expect(plain(fromPlain)).toEqual(plain(fromStream));
  });

  it('with snapshot=true, Last-Event-ID and the epoch, resumes instead of sending a snapshot; without the epoch, resets', async () => {
    await writeBatch(base, [1, 2, 3].map((i) => ({ key: `k${i}`, value: i })));
    const epoch = t.app.services.store.epoch;
    const stream = await SseClient.connect(streamUrl(`snapshot=true&epoch=${epoch}`), { 'last-event-id': '2' });
    await stream.until((events) => lastId(events) === 3);
    expect(stream.events.map((e) => [e.id, e.event])).toEqual([['3', 'record']]);
    stream.close();
    // The offset alone could be of a log since restored (test/stream-epoch-resume.test.ts).
    const unnamed = await SseClient.connect(streamUrl('snapshot=true'), { 'last-event-id': '2' });
    await unnamed.ended;
    expect(unnamed.events.map((e) => e.event)).toEqual(['reset']);
    expect(JSON.parse(unnamed.events[0]!.data)).toMatchObject({ error: { code: 'epoch_changed', epoch } });
  });

  it('sends event: reset and ends when compaction moves the horizon past open readers', async () => {
    await writeBatch(base, [1, 2, 3].map((i) => ({ key: `k${i}`, value: i })));
    // Two readers at one offset share the read of the log, and its failure.
    const streams = await Promise.all([1, 2].map(() => SseClient.connect(streamUrl('after=0'))));
    await Promise.all(streams.map((s) => s.until((events) => lastId(events) === 3)));
    await setHorizon(5);
    await writeBatch(base, [{ key: 'k1', op: 'delete' }, { key: 'k2', op: 'delete' }]);
    for (const stream of streams) {
      await stream.ended;
      const reset = stream.events.at(-1)!;
      expect(reset.event).toBe('reset');
      expect(reset.id).toBeUndefined();
      expect(JSON.parse(reset.data)).toEqual({ error: { code: 'offset_compacted', message: expect.any(String), horizon: 5, epoch: t.app.services.store.epoch } });
      expect(stream.records().map((r) => r.offset)).toEqual([1, 2, 3]);
    }
  });

  it('gives streams woken by one commit each the records of its own prefix', async () => {
    const streams = await Promise.all(['prefix=a/', 'prefix=b/', '', 'prefix=a/'].map((q) => SseClient.connect(streamUrl(q))));
    await Promise.all(streams.map((s) => s.until(() => s.comments > 0)));
    await writeBatch(base, [{ key: 'a/1', value: 1 }, { key: 'b/1', value: 2 }, { key: 'c', value: 3 }]);
    await Promise.all(streams.map((s) => s.until((events) => lastId(events) === 3)));
    const seen = streams.map((s) => s.events.map((e) => `${e.event} ${e.id}`));
    expect(seen).toEqual([
      ['record 1', 'progress 3'],
      ['record 2', 'progress 3'],
      ['record 1', 'record 2', 'record 3'],
      ['record 1', 'progress 3'],
    ]);
    for (const stream of streams) stream.close();
  });

  it('answers 200 with event: reset and ends: below the horizon, ahead of the head, another epoch', async () => {
    await writeBatch(base, [1, 2, 3].map((i) => ({ key: `k${i}`, value: i })));
    await setHorizon(2);
    const epoch = t.app.services.store.epoch;
    const cases: [string, Record<string, string>, Record<string, unknown>][] = [
      ['after=1', {}, { code: 'offset_compacted', horizon: 2, epoch }],
      ['after=0', { 'last-event-id': '1' }, { code: 'offset_compacted', horizon: 2, epoch }],
      ['after=4', {}, { code: 'offset_ahead', head: 3, horizon: 2, epoch }],
      ['after=2', { 'last-event-id': '9' }, { code: 'offset_ahead', head: 3, horizon: 2, epoch }],
      ['after=3&epoch=another', {}, { code: 'epoch_changed', horizon: 2, epoch }],
      ['snapshot=true&epoch=another', {}, { code: 'epoch_changed', epoch }],
    ];
    for (const [query, headers, error] of cases) {
      const stream = await SseClient.connect(streamUrl(query), headers);
      await stream.ended;
      expect(stream.response.headers['x-log-epoch'], query).toBe(epoch);
      expect(stream.events.map((e) => [e.event, e.id]), query).toEqual([['reset', undefined]]);
      expect(JSON.parse(stream.events[0]!.data).error, query).toMatchObject({ ...error, message: expect.any(String) });
      // The long poll keeps its 410 for the same position.
      if (Object.keys(headers).length === 0 && !query.startsWith('snapshot')) {
        const polled = await fetch(`${base}/v1/changes?${query}`);
        expect(polled.status, query).toBe(410);
        expect(((await polled.json()) as { error: { code: string } }).error.code).toBe(error.code);
      }
    }
    const atHorizon = await SseClient.connect(streamUrl('after=2'));
    await atHorizon.until((events) => lastId(events) === 3);
    atHorizon.close();
  });

  it('refuses bad parameters with 400 invalid_request', async () => {
    const cases: [string, Record<string, string>][] = [
      ['snapshot=true&after=0', {}],
      ['snapshot=maybe', {}],
      ['after=-1', {}],
      ['prefix=%00', {}],
      ['after=1&after=2', {}],
      ['', { 'last-event-id': 'abc' }],
      ['', { 'last-event-id': '-1' }],
    ];
    for (const [query, headers] of cases) {
      const answer = (await SseClient.open(streamUrl(query), headers)) as { status: number; body: string };
      expect(answer.status, query + JSON.stringify(headers)).toBe(400);
      expect(JSON.parse(answer.body).error.code).toBe('invalid_request');
    }
  });

  it('ignores query parameters it does not take, as cache-busters that polyfills add', async () => {
    await put('k', 1);
    const stream = await SseClient.connect(streamUrl('after=0&_=1764400000000&limit=10&t=x&t=y'));
    await stream.until((events) => lastId(events) === 1);
    stream.close();
    const polled = await fetch(`${base}/v1/changes?after=0&_=1764400000000`);
    expect(polled.status).toBe(400);
    await polled.body?.cancel();
  });

  it('lets go of its waiter when the client disconnects', async () => {
    const streams = await Promise.all([1, 2, 3].map(() => SseClient.connect(streamUrl())));
    await Promise.all(streams.map((s) => s.until((events) => events.length === 0 && s.comments === 1)));
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(t.app.services.notifier.waiting).toBe(3);
    for (const stream of streams) stream.close();
    const deadline = Date.now() + 1000;
    while (t.app.services.notifier.waiting > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    expect(t.app.services.notifier.waiting).toBe(0);
  });
});

describe('GET /v1/changes/stream with the eventsource package', () => {
  /** Opens an EventSource and records every event it dispatches. */
  function subscribe(url: string) {
    const source = new EventSource(url);
    const seen: { type: string; lastEventId: string; data: string }[] = [];
    let opens = 0;
    source.addEventListener('open', () => (opens += 1));
    for (const type of ['record', 'progress', 'snapshot-end']) {
      source.addEventListener(type, (event) => {
        const message = event as MessageEvent;
        seen.push({ type, lastEventId: message.lastEventId, data: message.data });
      });
    }
    return { source, seen, opens: () => opens };
  }

  async function until(check: () => boolean, timeoutMs = 8000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!check()) {
      if (Date.now() > deadline) throw new Error('timed out');
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }

  it('reconnects by itself with Last-Event-ID: every record arrives once, in order', async () => {
    const client = subscribe(streamUrl('after=0'));
    let written = 0;
    const writeSome = async (n: number): Promise<void> => {
      await writeBatch(base, Array.from({ length: n }, (_, i) => ({ key: `k${(written + i) % 7}`, value: written + i })));
      written += n;
    };
    await writeSome(20);
    await until(() => client.seen.length === 20);
    await cutConnections();
    await writeSome(15); // committed while the client is away
    await until(() => client.opens() === 2);
    await writeSome(10);
    await until(() => client.seen.length >= 45);
    await cutConnections();
    await until(() => client.opens() === 3);
    await writeSome(5);
    await until(() => client.seen.length >= 50);
    client.source.close();

    const offsets = client.seen.map((e) => (JSON.parse(e.data) as WireRecord).offset);
    expect(offsets).toEqual(Array.from({ length: 50 }, (_, i) => i + 1));
    expect(client.seen.map((e) => Number(e.lastEventId))).toEqual(offsets);
  });

  it('moves a filtered reader forward with progress, so a reconnect skips what it filtered out', async () => {
    await put('a/1', 1);
    await writeBatch(base, [1, 2, 3, 4, 5].map((i) => ({ key: `b/${i}`, value: i })));
    const client = subscribe(streamUrl('after=0&prefix=a/'));
    await until(() => client.seen.some((e) => e.type === 'progress' && e.lastEventId === '6'));
    await cutConnections();
    await until(() => client.opens() === 2);
    await put('a/2', 2);
    await until(() => client.seen.filter((e) => e.type === 'record').length === 2);
    client.source.close();
    const records = client.seen.filter((e) => e.type === 'record').map((e) => JSON.parse(e.data) as WireRecord);
    expect(records.map((r) => [r.offset, r.key])).toEqual([[1, 'a/1'], [7, 'a/2']]);
  });

  it('with snapshot=true, builds the same state as a plain snapshot plus changes', async () => {
    await writeBatch(base, Array.from({ length: 30 }, (_, i) => ({ key: `k${i}`, value: i })));
    await writeBatch(base, [{ key: 'k3', op: 'delete' }, { key: 'k4', value: 'four' }]);
    const client = subscribe(streamUrl('snapshot=true'));
    await until(() => client.seen.some((e) => e.type === 'snapshot-end'));
    await writeBatch(base, [{ key: 'k5', op: 'delete' }, { key: 'new', value: { n: 1 } }]);
    await until(() => client.seen.at(-1)?.lastEventId === '34');
    client.source.close();

    const end = client.seen.findIndex((e) => e.type === 'snapshot-end');
    expect(client.seen[end]!.lastEventId).toBe('32');
    const records = client.seen.filter((e) => e.type === 'record').map((e) => JSON.parse(e.data) as WireRecord);
    const snapshot = await readSnapshot(base);
    expect(plain(applyRecords(new Map(), records))).toEqual(plain(stateOf(snapshot.entries)));
    expect(records.length).toBe(29 + 2);
  });
});
