// A worker's StateMirror and watch() under faults, against the real server process:
// kill -9 and a restart (resumed, no new snapshot, no gap, no duplicate), a wrong token
// (fails at once, no retries) and a server that is down (typed errors naming the URL).
import { existsSync, rmSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { StateMirror, StatelogClient, StatelogError, type LogRecord, type RetryEvent, type WatchEvent } from '@statelog/client';
import { json, startApp, tempDir, testStore, type TestStore } from './support/helpers.js';
import { portOf } from './support/http.js';
import { spawnServer, type UrlServer } from './support/child-server.js';
import { cuttableProxy } from './support/flaky-proxy.js';

let dir: string | undefined;
let store: TestStore | undefined;
const servers: UrlServer[] = [];
const mirrors: StateMirror[] = [];
const stops: AbortController[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0)) stop.abort();
  for (const mirror of mirrors.splice(0)) await mirror.close();
  for (const server of servers.splice(0)) server.proc.kill('SIGKILL');
  if (dir && existsSync(dir)) rmSync(dir, { recursive: true, force: true });
  await store?.drop();
  store = undefined;
  dir = undefined;
});

async function start(env: Record<string, string>): Promise<UrlServer> {
  const server = await spawnServer(env);
  servers.push(server);
  return server;
}

const FAST = { baseDelayMs: 20, maxDelayMs: 200 };

async function until(check: () => boolean, what: string, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** The server's state through a snapshot. */
async function stateOf(client: StatelogClient): Promise<Map<string, unknown>> {
  const state = new Map<string, unknown>();
  for await (const entry of await client.snapshot()) state.set(entry.key, entry.value);
  return state;
}

describe.each(['changes', 'stream'] as const)('across kill -9 of the server (follow: %s)', (follow) => {
  it('a StateMirror and a watch() resume where they were: no new snapshot, no gap, no duplicate', { timeout: 90_000 }, async () => {
    dir = tempDir();
    store = await testStore(dir, 'watch.db');
    let server = await start(store.env);
    const client = new StatelogClient({ url: server.url });
    for (let i = 0; i < 20; i++) await client.put(`k${i % 7}`, i);

    const warnings: string[] = [];
    const mirror = new StateMirror({ url: server.url, follow, retry: FAST, warn: (m) => warnings.push(m) });
    mirrors.push(mirror);
    const resets: unknown[] = [];
    const retries: RetryEvent[] = [];
    mirror.on('reset', (event) => resets.push(event));
    mirror.on('retry', (event) => retries.push(event));
    await mirror.ready;

    const stop = new AbortController();
    stops.push(stop);
    const events: WatchEvent[] = [];
    const watching = (async () => {
      for await (const event of client.watch({ follow, signal: stop.signal, retry: FAST })) events.push(event);
    })();
    await until(() => events.some((e) => e.type === 'initialized'), 'the watch to be initialized');
    const initialized = events.find((e) => e.type === 'initialized') as { offset: number };

    for (let i = 20; i < 30; i++) await client.put(`k${i % 7}`, i);
    await until(() => mirror.offset === 30, 'the mirror to reach 30');

    // kill -9, then the same database behind the same address.
    const { port } = server;
    server.proc.kill('SIGKILL');
    await server.exited;
    await until(() => retries.length > 0, 'the mirror to retry');
    server = await start({ ...store.env, PORT: String(port) });
    for (let i = 30; i < 45; i++) await client.put(`k${i % 7}`, i === 40 ? null : i);
    await client.delete('k3');

    await until(() => mirror.offset === 46, 'the mirror to reach 46');
    expect(mirror.snapshots).toBe(1);
    expect(resets).toEqual([]);
    expect(new Map(mirror.entries())).toEqual(await stateOf(client));
    // Each retry was said, with its cause.
    expect(warnings.some((w) => /reconnecting in \d+ ms/.test(w))).toBe(true);
    expect(retries[0]!.cause).toBeInstanceOf(StatelogError);
    expect(retries[0]!.cause.message).toContain(server.url);

    await until(() => events.some((e) => e.type === 'record' && !e.snapshot && e.record.offset === 46), 'the watch to reach 46');
    stop.abort();
    await watching;
    expect(events.filter((e) => e.type === 'initialized')).toHaveLength(1);
    expect(events.filter((e) => e.type === 'reset')).toEqual([]);
    const live = events.filter((e): e is { type: 'record'; record: LogRecord; snapshot: false } => e.type === 'record' && !e.snapshot);
    const offsets = live.map((e) => e.record.offset);
    const expected = Array.from({ length: 46 - initialized.offset }, (_, i) => initialized.offset + 1 + i);
    expect(offsets).toEqual(expected);
  });
});

describe.each(['changes', 'stream'] as const)('a snapshot cut midway (follow: %s)', (follow) => {
  it('is reset (snapshot_cut) and taken again from the start, then initialized', { timeout: 90_000 }, async () => {
    const t = await startApp();
    try {
      // Large enough that the snapshot is still streaming when the network is cut.
      const value = 'v'.repeat(5000);
      for (let b = 0; b < 4; b++) {
        const records = Array.from({ length: 500 }, (_, i) => ({ key: `k${String(b * 500 + i).padStart(4, '0')}`, value }));
        await t.http.post('/v1/records').set(json).send({ records }).expect(200);
      }
      const proxy = await cuttableProxy('127.0.0.1', portOf(t.app.server));
      try {
        const viaProxy = new StatelogClient({ url: `http://127.0.0.1:${proxy.port}` });
        const stop = new AbortController();
        stops.push(stop);
        const events: WatchEvent[] = [];
        let cut = false;
        for await (const event of viaProxy.watch({ follow, signal: stop.signal, retry: FAST })) {
          events.push(event);
          if (!cut && event.type === 'record' && events.length === 100) {
            cut = true;
            await proxy.cut();
            await proxy.restore();
          }
          if (event.type === 'initialized') break;
        }
        const types = events.map((e) => (e.type === 'reset' ? `reset ${e.reason}` : e.type));
        const reset = types.indexOf('reset snapshot_cut');
        expect(reset).toBeGreaterThanOrEqual(100);
        expect(types.filter((type) => type.startsWith('reset'))).toEqual(['reset snapshot_cut']);
        // After the reset: the whole snapshot again, in key order, then initialized.
        const again = events.slice(reset + 1).filter((e) => e.type === 'record').map((e) => (e as { record: LogRecord }).record.key);
        expect(again).toHaveLength(2000);
        expect([again[0], again.at(-1)]).toEqual(['k0000', 'k1999']);
        expect(events.at(-1)).toMatchObject({ type: 'initialized', offset: 2000 });
      } finally {
        await proxy.close();
      }
    } finally {
      await t.close();
    }
  });
});

describe('a wrong token', () => {
  it('rejects the mirror\'s ready with a typed 401 at once and stops retrying', async () => {
    dir = tempDir();
    store = await testStore(dir, 'auth.db');
    const server = await start({ ...store.env, STATELOG_TOKENS: 'read:right-token' });
    const warnings: string[] = [];
    const mirror = new StateMirror({ url: server.url, token: 'wrong-token', retry: FAST, warn: (m) => warnings.push(m) });
    mirrors.push(mirror);
    const errors: Error[] = [];
    mirror.on('error', (err) => errors.push(err));
    const started = Date.now();
    const failure = await mirror.ready.then(() => null, (err: unknown) => err);
    expect(Date.now() - started).toBeLessThan(3000);
    expect(failure).toBeInstanceOf(StatelogError);
    expect(failure).toMatchObject({ status: 401, code: 'unauthorized' });
    // Nothing more is tried.
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(errors).toEqual([failure]);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/^stopped: /);

    // watch() ends with the same error.
    const watching = new StatelogClient({ url: server.url, token: 'wrong-token' }).watch({ retry: FAST });
    await expect(watching.next()).rejects.toMatchObject({ status: 401, code: 'unauthorized' });
  });
});

describe('a server that is down', () => {
  it('gives StatelogError unreachable naming the URL and the cause, not fetch\'s bare TypeError', async () => {
    dir = tempDir();
    store = await testStore(dir, 'down.db');
    const server = await start(store.env);
    server.proc.kill('SIGKILL');
    await server.exited;
    const client = new StatelogClient({ url: server.url, retry: { retries: 1, baseDelayMs: 10 } });
    const failure = await client.get('k').then(() => null, (err: unknown) => err);
    expect(failure).toBeInstanceOf(StatelogError);
    expect(failure).toMatchObject({ status: 0, code: 'unreachable', details: { url: server.url, cause: 'ECONNREFUSED' } });
    expect((failure as Error).message).toBe(`cannot reach ${server.url}: connection refused`);

    // A watch keeps trying, saying why each time, until it is stopped.
    const stop = new AbortController();
    stops.push(stop);
    const causes: StatelogError[] = [];
    const events: WatchEvent[] = [];
    const watching = (async () => {
      const watch = client.watch({ after: 0, signal: stop.signal, retry: FAST, onRetry: (cause) => causes.push(cause) });
      for await (const event of watch) events.push(event);
    })();
    await until(() => causes.length >= 3, 'three retries');
    stop.abort();
    await watching;
    expect(events).toEqual([]);
    expect(causes[0]).toMatchObject({ code: 'unreachable', message: `cannot reach ${server.url}: connection refused` });
  });
});
