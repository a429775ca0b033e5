// Readers never hold the log hostage: a snapshot reader that stops reading, or reads
// slowly, while writers go on must not keep the database's read transaction open (on
// SQLite the WAL would grow with every write; on PostgreSQL vacuum would be held back);
// a stalled reader is cut after STATELOG_STALLED_READER_MS, without the trailer, and its
// slot is freed; a slow reader gets the whole snapshot and its trailer.
import { statSync } from 'node:fs';
import http from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { startApp, TEST_STORE, type TestApp } from './support/helpers.js';
import { baseUrl, readSnapshot, SseClient } from './support/stream-clients.js';

const KEYS = 6000;
/** About 6 MB of snapshot: more than loopback's socket buffers hold. */
const PAD = 'x'.repeat(1000);
/** Each write: one 64 KiB value. */
const BIG = JSON.stringify({ value: 'w'.repeat(64 * 1024) });

let t: TestApp | undefined;
afterEach(async () => {
  await t?.close();
  t = undefined;
});

/** About 48 MB: more than loopback's socket buffers on both sides hold, so a reader that stops reading stalls the stream. */
const STALLED_KEYS = 48_000;

async function start(env: Record<string, string>, keys = KEYS): Promise<TestApp> {
  t = await startApp(
    { STATELOG_MAX_SNAPSHOTS: '1', STATELOG_SYNC: 'normal', ...env },
    { seed: (database) => database.seedLiveKeys({ count: keys, value: (i) => JSON.stringify({ n: i, pad: PAD }) }) },
  );
  return t;
}

function walBytes(app: TestApp): number {
  try {
    return statSync(`${app.dbPath}-wal`).size;
  } catch {
    return 0;
  }
}

interface Stalled {
  request: http.ClientRequest;
  /** Reads on to the end of the connection, however it ends: what came, and whether the answer was complete. */
  drain: () => Promise<{ text: string; complete: boolean }>;
}

/** A snapshot read up to its first chunk, then not read any more. */
function stalledSnapshot(base: string, path = '/v1/snapshot'): Promise<Stalled> {
  return new Promise((resolve, reject) => {
    const request = http.get(`${base}${path}`, { agent: false }, (response) => {
      expect(response.statusCode).toBe(200);
      let text = '';
      const ended = new Promise<void>((done) => {
        response.on('end', done);
        response.on('error', () => done());
        response.on('aborted', () => done());
        request.on('close', () => done());
      });
      response.setEncoding('utf8');
      response.once('data', (chunk: string) => {
        text += chunk;
        response.pause();
        const drain = async () => {
          response.on('data', (more: string) => (text += more));
          response.resume();
          await ended;
          return { text, complete: response.complete };
        };
        resolve({ request, drain });
      });
    });
    request.on('error', () => {});
    request.once('error', reject);
  });
}

/** PostgreSQL ends a closed snapshot's transaction a round trip later. */
async function noReadTransaction(app: TestApp, timeout = 1000): Promise<void> {
  await expect.poll(() => app.database.readTransactionOpen(), { timeout, interval: 50 }).toBe(false);
}

/** Streams of a kind the server has open, from /metrics. */
async function openStreams(base: string, kind: string): Promise<number> {
  const text = await (await fetch(`${base}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`statelog_open_streams{kind="${kind}"}`));
  return Number(line?.split(' ')[1] ?? 0);
}


/** PUTs 64 KiB values until `bytes` are written; the WAL's size is sampled after each. */
async function write(base: string, bytes: number, sample: () => void): Promise<void> {
  for (let i = 0; i * BIG.length < bytes; i++) {
    const res = await fetch(`${base}/v1/keys/big-${i % 50}`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: BIG });
    expect(res.status).toBe(200);
    await res.arrayBuffer();
    sample();
  }
}

describe('a snapshot reader that stops reading', () => {
  it('holds no read transaction: the WAL stays small while 24 MB are written', async () => {
    const app = await start({ STATELOG_STALLED_READER_MS: '60000' });
    const base = baseUrl(app.app);
    const reader = await stalledSnapshot(base);
    try {
      await noReadTransaction(app);
      let largest = walBytes(app);
      await write(base, 24 * 1024 * 1024, () => (largest = Math.max(largest, walBytes(app))));
      // The WAL is checkpointed back every 1000 pages (4 MB) as no reader pins it.
      if (TEST_STORE === 'sqlite') expect(largest).toBeLessThan(16 * 1024 * 1024);
      await noReadTransaction(app);
    } finally {
      reader.request.destroy();
    }
  });

  it('is cut after STATELOG_STALLED_READER_MS, without the trailer, and holds no read of the store meanwhile', { timeout: 90_000 }, async () => {
    const app = await start({ STATELOG_STALLED_READER_MS: '1000' }, STALLED_KEYS);
    const base = baseUrl(app.app);
    const reader = await stalledSnapshot(base);
    // Cut within seconds of the setting.
    await expect.poll(() => openStreams(base, 'snapshot'), { timeout: 40_000, interval: 200 }).toBe(0);
    // STATELOG_MAX_SNAPSHOTS (1 here) bounds reads of the store, not readers: another is served.
    // Once the read of the store is over: it goes on at the database's pace whatever the reader does.
    await expect.poll(async () => (await fetch(`${base}/v1/snapshot?prefix=none`)).status, { timeout: 30_000, interval: 100 }).toBe(200);
    // Read on: the snapshot ends short, without its trailer, never cleanly.
    const { text, complete } = await reader.drain();
    expect(complete).toBe(false);
    expect(text).not.toContain('"end":true');
  });

  it('in a snapshot=true change stream is cut the same way, holding no read of the store', { timeout: 90_000 }, async () => {
    const app = await start({ STATELOG_STALLED_READER_MS: '1000' }, STALLED_KEYS);
    const base = baseUrl(app.app);
    const reader = await stalledSnapshot(base, '/v1/changes/stream?snapshot=true');
    // Spooling the whole state takes a moment: it is read at the database's speed.
    await noReadTransaction(app, 20_000);
    await expect.poll(() => openStreams(base, 'sse'), { timeout: 40_000, interval: 200 }).toBe(0);
    const stream = await SseClient.connect(`${base}/v1/changes/stream?snapshot=true&prefix=none`);
    stream.close();
    const { text, complete } = await reader.drain();
    expect(complete).toBe(false);
    expect(text).not.toContain('snapshot-end');
  });
});

describe('a slow snapshot reader', () => {
  it('gets the whole snapshot and its trailer while writers go on, without pinning the WAL', async () => {
    // The kernel takes more of a slowly read stream only once the reader has freed a
    // good part of its receive buffer (megabytes on loopback): seconds at this pace.
    const app = await start({ STATELOG_STALLED_READER_MS: '5000' });
    const base = baseUrl(app.app);
    let largest = walBytes(app);
    let writing = true;
    const writer = (async () => {
      while (writing) await write(base, BIG.length, () => (largest = Math.max(largest, walBytes(app))));
    })();
    // A pause after every chunk: some 3 s for the whole snapshot.
    const snapshot = await readSnapshot(base, '', 30);
    writing = false;
    await writer;
    // It may open after the first writes (their 50 keys are their own): every seeded key
    // is in it, and its trailer tells its own offset and count.
    expect(snapshot.offset).toBeGreaterThanOrEqual(KEYS);
    expect(snapshot.trailer).toMatchObject({ end: true, offset: snapshot.offset, count: snapshot.entries.length });
    expect(snapshot.entries.length).toBeGreaterThanOrEqual(KEYS);
    expect(snapshot.entries.length).toBeLessThanOrEqual(KEYS + 50);
    await noReadTransaction(app);
    if (TEST_STORE === 'sqlite') expect(largest).toBeLessThan(16 * 1024 * 1024);
  });
});
