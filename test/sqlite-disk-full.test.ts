// A full disk. The database lives on a tmpfs mounted with a size limit, so its writes
// fail with a real ENOSPC (SQLITE_FULL), exactly as on a full disk; a filler file takes
// the space and gives it back. Writes get 503 `unavailable` with Retry-After and
// /readyz is 503 while they fail; the server recovers by itself once space returns; a
// kill -9 while writers hit the full disk loses nothing that was acknowledged.
// Mounting needs root (or CAP_SYS_ADMIN): elsewhere the file is skipped.
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnServer, type UrlServer } from './support/child-server.js';
import { smallDisk } from './support/small-disk.js';

const disk = smallDisk('32m');
const { dir, mounted } = disk;
const dbPath = join(dir, 'full.db');
const servers: UrlServer[] = [];

afterAll(() => {
  for (const server of servers) server.proc.kill('SIGKILL');
  disk.remove();
});

const VALUE = 'v'.repeat(16 * 1024);

async function put(server: UrlServer, key: string): Promise<Response> {
  return fetch(`${server.url}/v1/keys/${key}`, {
    method: 'PUT',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ value: { key, pad: VALUE } }),
  });
}

async function start(): Promise<UrlServer> {
  const server = await spawnServer({ STATELOG_DB: dbPath, STATELOG_SYNC: 'full' });
  servers.push(server);
  return server;
}

describe.runIf(mounted)('a full disk (tmpfs with a size limit)', () => {
  let server: UrlServer;
  beforeAll(async () => {
    server = await start();
  });

  it('answers writes 503 with Retry-After and /readyz 503 while writes fail, and recovers by itself', async () => {
    disk.fill(1024 * 1024);
    let refused: Response | undefined;
    for (let i = 0; i < 400 && !refused; i++) {
      const res = await put(server, `fill-${i}`);
      if (res.status !== 200) refused = res;
      else await res.arrayBuffer();
    }
    expect(refused?.status).toBe(503);
    expect(refused?.headers.get('retry-after')).toBe('1');
    expect(((await refused!.json()) as { error: { code: string } }).error.code).toBe('unavailable');

    const ready = await fetch(`${server.url}/readyz`);
    expect(ready.status).toBe(503);
    expect(((await ready.json()) as { error: { reason: string } }).error.reason).toBe('no_space');
    // Reads go on.
    expect((await fetch(`${server.url}/v1/keys/fill-0`)).status).toBe(200);
    // The log says why, as an outage, not as a bug.
    const lines = server.logs();
    expect(lines.some((line) => line.msg === 'the database has no room to write' && line.level === 40)).toBe(true);
    expect(lines.some((line) => line.level === 50)).toBe(false);

    disk.free();
    await expect.poll(async () => (await fetch(`${server.url}/readyz`)).status, { timeout: 5000 }).toBe(200);
    expect((await put(server, 'after')).status).toBe(200);
  });

  it('loses nothing acknowledged when killed -9 while writers hit the full disk', async () => {
    disk.fill(2 * 1024 * 1024);
    const acked: string[] = [];
    let refusals = 0;
    let stop = false;
    const writer = async (w: number) => {
      for (let i = 0; !stop; i++) {
        try {
          const res = await put(server, `w${w}-${i}`);
          if (res.status === 200) acked.push(`w${w}-${i}`);
          else if (res.status === 503) refusals += 1;
          else throw new Error(`unexpected ${res.status}: ${await res.text()}`);
          await res.arrayBuffer().catch(() => {});
        } catch (err) {
          if (err instanceof Error && err.message.startsWith('unexpected')) throw err;
          return; // the server is gone
        }
      }
    };
    const writers = Array.from({ length: 4 }, (_, w) => writer(w));
    await expect.poll(() => refusals, { timeout: 20_000, interval: 50 }).toBeGreaterThan(20);
    server.proc.kill('SIGKILL');
    stop = true;
    await Promise.all(writers);
    await server.exited;
    expect(acked.length).toBeGreaterThan(0);

    disk.free();
    server = await start();
    for (const key of acked) {
      const res = await fetch(`${server.url}/v1/keys/${key}`);
      expect(res.status, key).toBe(200);
      expect(((await res.json()) as { value: { key: string } }).value.key).toBe(key);
    }
  });
});
