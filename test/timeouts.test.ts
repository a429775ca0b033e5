// Server timeouts: slow senders are cut off; slow answers (long polls, streams,
// snapshots) are not. The behaviour tests shrink the server's timeouts before it
// listens, so they take a second instead of the production values' minutes.
import { connect } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { SERVER_TIMEOUTS, type App } from '../src/app.js';
import { MAX_WAIT_SECONDS } from '../src/contract/schemas.js';
import { startApp, type TestApp } from './support/helpers.js';
import { portOf, send } from './support/http.js';

let t: TestApp | undefined;
afterEach(async () => {
  await t?.close();
  t = undefined;
});

/** Sends `text` on a raw connection and gathers everything until the server closes it. */
function rawExchange(port: number, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => socket.write(text));
    let received = '';
    socket.setEncoding('utf8').on('data', (chunk: string) => (received += chunk));
    socket.on('close', () => resolve(received));
    socket.on('error', reject);
  });
}

const SHORT = { headersTimeout: 150, requestTimeout: 300, checkInterval: 25 };

function shorten(app: App): void {
  app.server.headersTimeout = SHORT.headersTimeout;
  app.server.requestTimeout = SHORT.requestTimeout;
  // Read by Node when the server starts listening.
  (app.server as unknown as { connectionsCheckingInterval: number }).connectionsCheckingInterval = SHORT.checkInterval;
  // Stands for a long poll: an answer that takes a while to start.
  app.get('/v1/test-slow', async () => {
    await new Promise((resolve) => setTimeout(resolve, SHORT.requestTimeout * 4));
    return { done: true };
  });
}

describe('server timeouts', () => {
  it('are the documented values, consistent with long polls and streams', async () => {
    t = await startApp();
    const server = t.app.server;
    expect(server.headersTimeout).toBe(SERVER_TIMEOUTS.headersTimeoutMs);
    expect(server.requestTimeout).toBe(SERVER_TIMEOUTS.requestTimeoutMs);
    expect(server.keepAliveTimeout).toBe(SERVER_TIMEOUTS.keepAliveTimeoutMs);
    expect(server.timeout).toBe(SERVER_TIMEOUTS.connectionTimeoutMs);
    expect(SERVER_TIMEOUTS.headersTimeoutMs).toBeLessThanOrEqual(SERVER_TIMEOUTS.requestTimeoutMs);
    // A long poll is silent for up to MAX_WAIT_SECONDS; an SSE stream for 15 s.
    expect(SERVER_TIMEOUTS.connectionTimeoutMs).toBeGreaterThan(MAX_WAIT_SECONDS * 1000 + 30_000);
  });

  it('do not cut an answer that takes longer than the request timeout', async () => {
    t = await startApp({}, { prepare: shorten });
    const res = await send(portOf(t.app.server), { method: 'GET', path: '/v1/test-slow' });
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ done: true });
  });

  it('cut off a client that sends its headers too slowly', async () => {
    t = await startApp({}, { prepare: shorten });
    const answer = await rawExchange(portOf(t.app.server), 'GET /healthz HTTP/1.1\r\nHost: x\r\n');
    expect(answer).toMatch(/^HTTP\/1\.1 408 /);
    expect(JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4))).toMatchObject({ error: { code: 'invalid_request' } });
  });

  it('cut off a client that sends its body too slowly, writing nothing', async () => {
    t = await startApp({}, { prepare: shorten });
    const head = 'PUT /v1/keys/slow HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n';
    const answer = await rawExchange(portOf(t.app.server), `${head}{"value":`);
    expect(answer).toMatch(/^HTTP\/1\.1 408 /);
    expect((await t.http.get('/v1/keys/slow')).status).toBe(404);
  });
});
