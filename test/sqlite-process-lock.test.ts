// One process per SQLite file: a second server on a file in use exits 1 at start with a
// line naming the file and the holder's pid; a lock left by a process killed with
// SIGKILL never blocks the restart.
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { tempDir } from './support/helpers.js';
import { runServerExpectingExit, spawnServer, type UrlServer } from './support/child-server.js';

let dir: string | undefined;
let servers: UrlServer[] = [];
afterEach(() => {
  for (const server of servers) server.proc.kill('SIGKILL');
  servers = [];
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('one process per database file', () => {
  it('refuses a second server on a file in use, and a restart after kill -9 succeeds', async () => {
    dir = tempDir();
    const env = { STATELOG_DB: join(dir, 'one.db'), STATELOG_SYNC: 'full' };
    const first = await spawnServer(env);
    servers.push(first);
    const put = await fetch(`${first.url}/v1/keys/a`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: '{"value":1}' });
    expect(put.status).toBe(200);

    const second = await runServerExpectingExit(env);
    expect(second.code).toBe(1);
    const lines = second.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(env.STATELOG_DB);
    expect(lines[0]).toContain(`pid ${first.proc.pid}`);
    // The first server went on serving, untouched.
    expect((await fetch(`${first.url}/v1/keys/a`)).status).toBe(200);

    first.proc.kill('SIGKILL');
    await first.exited;
    const restarted = await spawnServer(env);
    servers.push(restarted);
    const read = await fetch(`${restarted.url}/v1/keys/a`);
    expect(await read.json()).toMatchObject({ value: 1 });
  });
});
