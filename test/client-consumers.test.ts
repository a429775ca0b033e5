// The client's consumers: the calls, watch() resuming from and committing to the server-kept
// position across a restart of the worker, and a StateMirror committing what it applied.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { StateMirror, StatelogClient, type WatchEvent } from '@statelog/client';
import { startApp, type TestApp } from './support/helpers.js';

let t: TestApp;
let client: StatelogClient;
let url: string;
beforeEach(async () => {
  t = await startApp();
  url = `http://127.0.0.1:${(t.app.server.address() as { port: number }).port}`;
  client = new StatelogClient({ url, retry: { baseDelayMs: 5 } });
});
afterEach(async () => {
  await client.close();
  await t.close();
});

/** A worker: runs a watch in the background, keeping what it is given, until stopped. */
function worker(options: Parameters<StatelogClient['watch']>[0]) {
  const stop = new AbortController();
  const events: WatchEvent[] = [];
  const running = (async () => {
    for await (const event of client.watch({ ...options, signal: stop.signal })) events.push(event);
  })();
  return {
    events,
    records: () => events.flatMap((e) => (e.type === 'record' ? [`${e.record.op} ${e.record.key} ${e.record.offset}${e.snapshot ? ' snapshot' : ''}`] : [])),
    async stop() {
      stop.abort();
      await running;
    },
  };
}

async function until(check: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('not reached in time');
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

const positionOf = async (name: string) => (await client.consumer(name))?.offset ?? null;

describe('consumers in the client', () => {
  it('commits, reads, lists and deletes', async () => {
    await client.put('a', 1);
    await client.put('b', 2);
    expect(await client.consumer('w')).toBeNull();
    expect(await client.commitConsumer('w', 1, { hold: true })).toMatchObject({ name: 'w', offset: 1, lag: 1, hold: true });
    await expect(client.commitConsumer('w', 0)).rejects.toMatchObject({ status: 409, code: 'conflict', details: { currentOffset: 1 } });
    await expect(client.commitConsumer('w', 2, { ifMatch: 0 })).rejects.toMatchObject({ code: 'precondition_failed' });
    expect(await client.commitConsumer('w', 0, { rewind: true, ifMatch: 1 })).toMatchObject({ offset: 0, hold: true });
    expect((await client.consumers()).consumers.map((c) => c.name)).toEqual(['w']);
    expect(await client.deleteConsumer('w')).toBe(true);
    expect(await client.deleteConsumer('w')).toBe(false);
  });

  it('watch() with a consumer resumes after the committed offset when the worker starts again', async () => {
    for (let i = 0; i < 3; i++) await client.put(`k${i}`, i);
    // No consumer yet: a snapshot, whose offset is committed once the worker has taken it.
    const first = worker({ consumer: 'indexer' });
    await until(async () => (await positionOf('indexer')) === 3);
    await first.stop();
    expect(first.records()).toEqual(['set k0 1 snapshot', 'set k1 2 snapshot', 'set k2 3 snapshot']);

    await client.put('k3', 3);
    await client.delete('k0');
    // Started again: only the changes after the committed offset, which it commits in turn.
    const second = worker({ consumer: 'indexer' });
    await until(async () => (await positionOf('indexer')) === 5);
    await second.stop();
    expect(second.events[0]).toMatchObject({ type: 'initialized', offset: 3 });
    expect(second.records()).toEqual(['set k3 4', 'delete k0 5']);
    expect(await client.consumer('indexer')).toMatchObject({ offset: 5, lag: 0 });
  });

  it('a StateMirror commits the offsets it has applied to its consumer, with a hold', async () => {
    await client.put('inv/a', 1);
    const mirror = new StateMirror({ url, prefix: 'inv/', consumer: { name: 'mirror-1', hold: true }, retry: { baseDelayMs: 10 } });
    try {
      await mirror.ready;
      await client.put('inv/b', 2);
      await client.put('inv/c', 3);
      const deadline = Date.now() + 10_000;
      let shown = await client.consumer('mirror-1');
      while ((shown?.offset ?? 0) < 3 && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 50));
        shown = await client.consumer('mirror-1');
      }
      expect(shown).toMatchObject({ offset: 3, hold: true, lag: 0 });
      expect(mirror.get('inv/c')).toBe(3);
    } finally {
      await mirror.close();
    }
  });
});
