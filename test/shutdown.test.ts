// Graceful shutdown of a real server process: SIGTERM while event streams, long polls
// and snapshots are open. Streams and long polls end cleanly, a snapshot whose reader
// has stopped reading is cut (no end line), and the process exits 0 within 10 s.
import { spawn, type ChildProcess } from 'node:child_process';
import http from 'node:http';
import { rmSync } from 'node:fs';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { SERVER_ENTRY } from '../harness/build.js';
import { tempDir, testStore, type TestStore } from './support/helpers.js';
import { SseClient } from './support/stream-clients.js';

let dir: string;
let database: TestStore;
let child: ChildProcess;
let base: string;
let output = '';
/**
 * Keeps connections open after an answer, as browsers and proxies do: the server must
 * close them itself, or server.close() waits and the process does not exit in time.
 */
const keepAlive = new http.Agent({ keepAlive: true });

beforeAll(async () => {
  dir = tempDir();
  database = await testStore(dir);
  // Larger than the socket buffers, so that a reader that stops reading holds the stream.
  await database.seedLiveKeys({ count: 100_000, value: (i) => JSON.stringify({ n: i, pad: 'x'.repeat(250) }) });
  child = spawn(process.execPath, [SERVER_ENTRY], {
    env: { ...process.env, ...database.env, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'debug', STATELOG_SYNC: 'normal' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  base = await new Promise<string>((resolve, reject) => {
    child.stdout!.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      const match = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(output);
      if (match) resolve(match[1]!);
    });
    child.on('exit', (code) => reject(new Error(`the server exited with ${code}: ${output}`)));
  });
});
afterAll(async () => {
  keepAlive.destroy();
  if (child?.exitCode === null) child.kill('SIGKILL');
  await database?.drop();
  rmSync(dir, { recursive: true, force: true });
});

interface Answer {
  status: number;
  body: string;
  /** True when the whole message arrived (false when the connection was cut). */
  complete: boolean;
}

/** A GET read to its end; with `stopReading`, reading stops after the first chunk until resume(). */
function get(path: string, stopReading = false): { done: Promise<Answer>; resume(): void } {
  let response: http.IncomingMessage | undefined;
  let reading = !stopReading;
  const done = new Promise<Answer>((resolve) => {
    const request = http.get(`${base}${path}`, { agent: keepAlive }, (res) => {
      response = res;
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        body += chunk;
        if (!reading) res.pause();
      });
      res.on('close', () => resolve({ status: res.statusCode!, body, complete: res.complete }));
    });
    request.on('error', () => resolve({ status: 0, body: '', complete: false }));
  });
  return {
    done,
    // A paused reader sees the end of the connection only once it reads up to it.
    resume() {
      reading = true;
      response?.resume();
    },
  };
}

it('ends streams and long polls, cuts a stalled snapshot, and exits 0 within 10 s on SIGTERM', async () => {
  const streams = await Promise.all(
    ['after=100000', 'after=99990&prefix=key/', 'snapshot=true&prefix=key/00000001'].map((q) =>
      SseClient.connect(`${base}/v1/changes/stream?${q}`, {}, keepAlive),
    ),
  );
  await Promise.all(streams.map((s) => s.until((events) => s.comments > 0 && (events.length > 0 || s === streams[0]))));
  const polls = [get('/v1/changes?after=100000&wait=60'), get('/v1/changes?after=100000&prefix=a&wait=60')].map((p) => p.done);
  const stalledSnapshot = get('/v1/snapshot', true);
  const stalledStream = get('/v1/changes/stream?snapshot=true', true);
  await new Promise((resolve) => setTimeout(resolve, 500));

  const started = Date.now();
  child.kill('SIGTERM');
  const exitCode = await new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  console.log('OUTPUT', output.slice(-5000));
  expect(Date.now() - started).toBeLessThan(10_000);
  expect(exitCode, output).toBe(0);
  expect(output).not.toMatch(/Warning|"level":50/);

  for (const stream of streams) {
    await stream.ended;
    expect(stream.response.complete).toBe(true);
  }
  for (const poll of await Promise.all(polls)) {
    expect(poll).toMatchObject({ status: 200, complete: true });
    expect(JSON.parse(poll.body)).toMatchObject({ records: [], next: 100000, head: 100000 });
  }
  stalledSnapshot.resume();
  stalledStream.resume();
  const snapshot = await stalledSnapshot.done;
  // Cut short when it was being sent; refused with 503 when shutdown came while it was
  // still being spooled (on a busy machine): never a whole answer that is not whole.
  if (snapshot.status === 503) expect(JSON.parse(snapshot.body)).toMatchObject({ error: { code: 'unavailable' } });
  else expect(snapshot.complete).toBe(false);
  expect(snapshot.body).not.toContain('"end":true');
  // A stream is ended, or cut when its reader is seen not to read: either way without
  // its snapshot-end, so the client knows that the snapshot is incomplete.
  const stream = await stalledStream.done;
  expect(stream.body).not.toContain('snapshot-end');
}, 60_000);
