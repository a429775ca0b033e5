// kill -9 under writers while the server does its harder work: 300 filtered long polls
// and streams reading a long log, numbers beyond 2^53 through PUT and batches, gzip
// bodies. A real server process is killed mid-load and restarted on the same database:
// every acknowledged write is there with its value's very digits, every record a reader
// was shown is there as shown, and the offsets run from 1 to the head without a gap.
import { gzipSync } from 'node:zlib';
import { describe, expect, it, vi } from 'vitest';
import { childServers } from './support/child-server.js';
import { expectAllThere, postValues, putValue, Writers } from './support/acked-writes.js';
import { SseClient, writeBatch, type ChangesAnswer, type WireRecord } from './support/stream-clients.js';

const servers = childServers();

/** Kills the server once `writers` have `atLeast` acknowledged writes (and `ready` holds), then waits for them to stop. */
async function killUnderLoad(server: Awaited<ReturnType<typeof servers.start>>, writers: Writers, atLeast: number, ready = () => true): Promise<void> {
  await vi.waitFor(() => expect(writers.acked.length >= atLeast && ready()).toBe(true), { timeout: 90_000, interval: 50 });
  await servers.kill(server);
  await writers.done;
  expect(writers.refused).toEqual([]);
}

describe('kill -9 under writers', () => {
  it('during 300 filtered long polls and streams from offset 0: nothing acknowledged or shown is lost', async () => {
    let server = await servers.start();
    // A log to scan, with nothing under the readers' prefixes: each read examines a bounded stretch of it.
    for (let b = 0; b < 10; b++) {
      expect((await writeBatch(server.url, Array.from({ length: 1000 }, (_, i) => ({ key: `fill/${b}/${i}`, value: i })))).status).toBe(200);
    }
    // What readers were shown, by offset: two readers shown one offset were shown the same record.
    const shown = new Map<number, WireRecord>();
    const unexpected: string[] = [];
    const show = (records: WireRecord[], prefix: string): void => {
      for (const record of records) {
        if (!record.key.startsWith(prefix)) unexpected.push(`${prefix} reader got ${record.key}`);
        const before = shown.get(record.offset);
        if (before && JSON.stringify(before) !== JSON.stringify(record)) unexpected.push(`offset ${record.offset} shown differently`);
        shown.set(record.offset, record);
      }
    };
    const polled = new Set<number>();
    const prefixOf = (id: number): string => (id % 2 === 0 ? 'a/' : 'b/');
    const poller = async (id: number): Promise<void> => {
      const prefix = prefixOf(id);
      for (let after = 0; ; ) {
        let page: ChangesAnswer;
        try {
          const res = await fetch(`${server.url}/v1/changes?after=${after}&prefix=${prefix}&wait=30`);
          if (res.status !== 200) return void unexpected.push(`poll ${res.status}: ${await res.text()}`);
          page = (await res.json()) as ChangesAnswer;
        } catch {
          return; // the server is gone
        }
        show(page.records, prefix);
        polled.add(id);
        after = page.next;
      }
    };
    const polls = Array.from({ length: 200 }, (_, id) => poller(id));
    const streams = await Promise.all(Array.from({ length: 100 }, (_, id) => SseClient.connect(`${server.url}/v1/changes/stream?after=0&prefix=${prefixOf(id)}`)));
    const writers = new Writers(4, async (w, i) => {
      return putValue(server.url, `${w % 2 === 0 ? 'a' : 'b'}/w${w}-${i}`, `{"w":${w},"i":${i}}`);
    });
    // Killed once every reader is following the log. Each write wakes all 300 readers, so
    // writes are slow on a busy machine: fewer are waited for than below.
    const following = () => polled.size === 200 && streams.every((stream) => stream.named('record').length > 0);
    await killUnderLoad(server, writers, 50, following);
    await Promise.all([...polls, ...streams.map((stream) => stream.ended)]);
    streams.forEach((stream, id) => show(stream.records(), prefixOf(id)));
    expect(unexpected).toEqual([]);
    expect(shown.size).toBeGreaterThan(0);

    server = await servers.start();
    await expectAllThere(server.url, writers.acked, [...shown.values()]);
  }, 180_000);

  it('while writing numbers beyond 2^53 through PUT and POST /v1/records: every digit is kept', async () => {
    let server = await servers.start();
    const writers = new Writers(4, async (w, i) => {
      const key = `n/w${w}-${i}`;
      const big = `${9007199254740993n + BigInt(1000 * i + w)}`;
      if (i % 2 === 0) return putValue(server.url, key, `[${big},${w}.${'0'.repeat(18)}${i + 1},-1234567890123456789012${i}]`);
      return postValues(server.url, [
        { key: `${key}/a`, value: `{"big":12345678901234567890${i},"x":1.${'0'.repeat(19)}${w + 1}}` },
        { key: `${key}/b`, value: big },
      ]);
    });
    await killUnderLoad(server, writers, 300);

    server = await servers.start();
    await expectAllThere(server.url, writers.acked);
  }, 120_000);

  it('while writing gzip-encoded PUT and batch bodies', async () => {
    let server = await servers.start();
    const writers = new Writers(4, async (w, i) => {
      const key = `z/w${w}-${i}`;
      const gzip = { encode: gzipSync, headers: { 'content-encoding': 'gzip' } };
      if (i % 2 === 0) return putValue(server.url, key, JSON.stringify({ w, i, text: 'gzip '.repeat(200) }), gzip);
      const items = [0, 1, 2].map((n) => ({ key: `${key}/${n}`, value: JSON.stringify({ n, text: 'batch '.repeat(100) }) }));
      return postValues(server.url, items, gzip);
    });
    await killUnderLoad(server, writers, 300);

    server = await servers.start();
    await expectAllThere(server.url, writers.acked);
  }, 120_000);
});
