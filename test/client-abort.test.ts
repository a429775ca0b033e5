// A client that resets its connection in the middle of an upload: logged at info as a
// client abort, never as the database being unavailable (a warning that pages nobody
// should be sent for a client's network).
import { rmSync } from 'node:fs';
import net from 'node:net';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { tempDir } from './support/helpers.js';
import { spawnServer, type UrlServer } from './support/child-server.js';

const dir = tempDir();
let server: UrlServer | undefined;
afterAll(() => {
  server?.proc.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

describe('a connection reset during an upload', () => {
  it('is logged at info as a client abort, and the server goes on', async () => {
    server = await spawnServer({ STATELOG_DB: join(dir, 'abort.db') });
    const socket = net.connect(server.port, '127.0.0.1');
    await new Promise((resolve) => socket.once('connect', resolve));
    socket.write('PUT /v1/keys/a HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"value":"');
    socket.write('x'.repeat(10_000));
    await new Promise((resolve) => setTimeout(resolve, 200));
    socket.resetAndDestroy();

    await expect
      .poll(() => server!.logs().find((line) => line.msg === 'the client aborted the request'), { timeout: 5000 })
      .toMatchObject({ level: 30 });
    const alarms = server.logs().filter((line) => Number(line.level) >= 40 && !String(line.msg).includes('every route is open to anyone'));
    expect(alarms).toEqual([]);
    expect((await fetch(`${server.url}/readyz`)).status).toBe(200);
  });
});
