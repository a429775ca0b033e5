// A snapshot of 200,000 keys against readers that stop reading or go away: the server
// must hold only a bounded amount, keep writing, and let go of the snapshot at once.
import http from 'node:http';
import v8 from 'node:v8';
import vm from 'node:vm';
import type { Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApp, type TestApp } from './support/helpers.js';
import { baseUrl, SseClient, untilStalled, type ErrorBody } from './support/stream-clients.js';

const KEYS = 200_000;
const PAD = 'x'.repeat(250);
/** Roughly the snapshot's size in bytes: every line carries a 250-byte value. */
const SNAPSHOT_BYTES = KEYS * 300;

let t: TestApp;
let base: string;

beforeAll(async () => {
  // Asynchronous commits: what is measured is whether the snapshot holds writers up,
  // not how long this disk takes to fsync.
  t = await startApp(
    { STATELOG_MAX_SNAPSHOTS: '1', STATELOG_SYNC: 'normal' },
    { seed: (database) => database.seedLiveKeys({ count: KEYS, value: (i) => JSON.stringify({ n: i, pad: PAD }) }) },
  );
  base = baseUrl(t.app);
  // The first fetch() of a process loads its HTTP client (tens of ms): not the server's time.
  await (await fetch(`${base}/healthz`)).arrayBuffer();
});
afterAll(async () => {
  await t?.close();
});

interface StalledReader {
  response: http.IncomingMessage;
  /** What was read before stopping. */
  first: string;
  request: http.ClientRequest;
  /** The server's side of the connection, to see how much it has written. */
  serverSocket: Socket;
}

/** Starts a snapshot on a new connection and stops reading after the first chunk. */
async function stalledSnapshot(): Promise<StalledReader> {
  const serverSocket = new Promise<Socket>((resolve) => t.app.server.once('connection', resolve));
  return new Promise((resolve, reject) => {
    const request = http.get(`${base}/v1/snapshot`, { agent: false }, (response) => {
      expect(response.statusCode).toBe(200);
      response.setEncoding('utf8');
      response.once('data', (first: string) => {
        response.pause();
        void serverSocket.then((socket) => resolve({ response, request, first, serverSocket: socket }));
      });
    });
    request.on('error', reject);
  });
}

async function timedPut(key: string): Promise<number> {
  const started = performance.now();
  const res = await fetch(`${base}/v1/keys/${key}`, {
    method: 'PUT',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ value: { at: Date.now() } }),
  });
  expect(res.status).toBe(200);
  return performance.now() - started;
}

// What is retained is measured, not garbage not yet collected: spooling the snapshot
// passes all of it through memory once, at the database's speed.
v8.setFlagsFromString('--expose-gc');
const collectGarbage = vm.runInNewContext('gc') as () => void;

const usedMemory = (): number => {
  collectGarbage();
  const { heapUsed, arrayBuffers } = process.memoryUsage();
  return heapUsed + arrayBuffers;
};

describe('a reader that stops reading a 200,000-key snapshot', () => {
  it('holds the server to a bounded buffer while writes complete within 100 ms, then finishes', async () => {
    const before = usedMemory();
    const reader = await stalledSnapshot();
    try {
      const written = await untilStalled(reader.serverSocket);
      // Only what the socket buffers hold was produced, not the snapshot.
      expect(written).toBeLessThan(SNAPSHOT_BYTES / 4);
      expect(usedMemory() - before).toBeLessThan(32 * 1024 * 1024);
      // The median of five, so one hiccup of a loaded machine does not decide.
      const times: number[] = [];
      for (let i = 0; i < 5; i++) times.push(await timedPut(`during-${i}`));
      expect(times.sort((a, b) => a - b)[2]).toBeLessThan(100);

      // Reading again resumes the same point-in-time view to its end line.
      let tail = '';
      let lines = 0;
      const count = (chunk: string): void => {
        for (let at = chunk.indexOf('\n'); at >= 0; at = chunk.indexOf('\n', at + 1)) lines += 1;
        tail = (tail + chunk).slice(-200);
      };
      count(reader.first);
      reader.response.on('data', count);
      reader.response.resume();
      await new Promise((resolve) => reader.response.on('end', resolve));
      const trailer = JSON.parse(tail.trimEnd().split('\n').pop()!);
      expect(trailer).toMatchObject({ end: true, offset: KEYS, count: KEYS });
      // The writes made during the pause are not in it.
      expect(lines).toBe(KEYS + 1);
    } finally {
      reader.request.destroy();
    }
  });
});

describe('the snapshot limit', () => {
  it('answers 429 with Retry-After beyond STATELOG_MAX_SNAPSHOTS, and a disconnect frees the slot at once', async () => {
    const reader = await stalledSnapshot();
    await timedPut('while-pinned');

    const refused = await fetch(`${base}/v1/snapshot`);
    expect(refused.status).toBe(429);
    expect(refused.headers.get('retry-after')).toBe('1');
    expect(((await refused.json()) as ErrorBody).error).toMatchObject({ code: 'too_many_requests' });
    // A stream with snapshot=true takes a slot from the same limit.
    const stream = await SseClient.open(`${base}/v1/changes/stream?snapshot=true`);
    expect(stream).toMatchObject({ status: 429, headers: { 'retry-after': '1' } });
    // The spooling goes on to its end whatever the reader does: no read transaction holds
    // the database at its offset while the reader dawdles (on SQLite, the WAL is free).
    await expect.poll(() => t.database.readTransactionOpen(), { timeout: 20_000, interval: 50 }).toBe(false);

    reader.request.destroy();
    const started = Date.now();
    let status = 0;
    while (Date.now() - started < 1000) {
      const res = await fetch(`${base}/v1/snapshot?prefix=none-such`);
      status = res.status;
      await res.arrayBuffer();
      if (status === 200) break;
    }
    expect(status).toBe(200);
  });
});
