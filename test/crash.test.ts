// Durability: every write answered 200 survives a SIGKILL of the server the instant after.
import { existsSync, rmSync } from 'node:fs';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { tempDir, testStore, type TestStore } from './support/helpers.js';
import { spawnServer, type UrlServer } from './support/child-server.js';

let dir: string;
let store: TestStore | undefined;
let servers: UrlServer[] = [];
afterEach(async () => {
  for (const server of servers) server.proc.kill('SIGKILL');
  servers = [];
  if (dir && existsSync(dir)) rmSync(dir, { recursive: true, force: true });
  await store?.drop();
  store = undefined;
});

interface Acked {
  key: string;
  value: number;
  offset: number;
}

async function start(env: Record<string, string>) {
  const server = await spawnServer({ ...env, STATELOG_SYNC: 'full' });
  servers.push(server);
  return server;
}

describe('crash safety', () => {
  it('keeps every acknowledged write after kill -9 under 8 concurrent writers', async () => {
    dir = tempDir();
    store = await testStore(dir, 'crash.db');
    const server = await start(store.env);

    const acked: Acked[] = [];
    let stop = false;
    const writer = async (w: number) => {
      for (let i = 0; !stop; i++) {
        const key = `w${w}/k${i}`;
        try {
          const res = await fetch(`${server.url}/v1/keys/${encodeURIComponent(key)}`, {
            method: 'PUT',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ value: i }),
          });
          if (res.status === 200) acked.push({ key, value: i, offset: ((await res.json()) as { offset: number }).offset });
        } catch {
          return; // the server is gone
        }
      }
    };
    const writers = Array.from({ length: 8 }, (_, w) => writer(w));
    // Killed mid-load once enough writes were answered (a busy machine takes longer).
    await vi.waitFor(() => expect(acked.length).toBeGreaterThan(200), { timeout: 20_000, interval: 50 });
    server.proc.kill('SIGKILL');
    stop = true;
    await Promise.all(writers);
    expect((await server.exited).signal).toBe('SIGKILL');
    expect(acked.length).toBeGreaterThan(100);

    const restarted = await start(store.env);
    for (const write of acked) {
      const res = await fetch(`${restarted.url}/v1/keys/${encodeURIComponent(write.key)}`);
      expect(res.status, write.key).toBe(200);
      expect(await res.json()).toMatchObject({ key: write.key, value: write.value, offset: write.offset });
    }
    const maxOffset = Math.max(...acked.map((write) => write.offset));
    const next = await fetch(`${restarted.url}/v1/keys/after-crash`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json' },
      body: '{"value":1}',
    });
    expect(((await next.json()) as { offset: number }).offset).toBeGreaterThan(maxOffset);
  });
});
