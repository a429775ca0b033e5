// The client's request timeout against real sockets that stop answering: before the
// headers, and in the middle of a body. No store plays a part: the server here is a bare
// TCP listener that writes what each case needs.
import { once } from 'node:events';
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { StatelogClient } from '@statelog/client';

let server: net.Server | undefined;
const sockets = new Set<net.Socket>();

/** A listener that answers each connection with `reply` (nothing if empty) and then stays silent. */
async function silentAfter(reply: string): Promise<string> {
  server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.once('data', () => {
      if (reply) socket.write(reply);
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`;
}

afterEach(async () => {
  for (const socket of sockets) socket.destroy();
  server?.close();
  if (server) await once(server, 'close');
  server = undefined;
});

describe('StatelogClient timeouts', () => {
  it('gives a typed timeout when no answer comes, after its retries', async () => {
    const url = await silentAfter('');
    const client = new StatelogClient({ url, timeoutMs: 150, retry: { retries: 1, baseDelayMs: 1 } });
    const started = Date.now();
    await expect(client.get('k')).rejects.toMatchObject({ code: 'timeout', details: { url, timeoutMs: 150 } });
    // Two attempts of 150 ms each, not one, and not the default 30 s.
    expect(Date.now() - started).toBeGreaterThanOrEqual(290);
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it('gives the same typed timeout when a body stops coming', async () => {
    const head = 'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n';
    const url = await silentAfter(`${head}{"key":"k","value":`);
    const client = new StatelogClient({ url, timeoutMs: 150, retry: { retries: 0 } });
    await expect(client.get('k')).rejects.toMatchObject({ code: 'timeout', details: { timeoutMs: 150 } });
  });

  it('gives the same typed timeout when an error answer\'s body stops coming', async () => {
    const head = 'HTTP/1.1 409 Conflict\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n';
    const url = await silentAfter(`${head}{"error":{"code":`);
    const client = new StatelogClient({ url, timeoutMs: 150, retry: { retries: 0 } });
    await expect(client.put('k', 1)).rejects.toMatchObject({ code: 'timeout', details: { timeoutMs: 150 } });
  });

  it('lets the caller abort a call that gets no answer, with the caller\'s reason', async () => {
    const url = await silentAfter('');
    const client = new StatelogClient({ url, timeoutMs: 10_000, retry: { retries: 0 } });
    const abort = new AbortController();
    const call = client.get('k', { signal: abort.signal });
    setTimeout(() => abort.abort(new Error('caller gave up')), 50);
    await expect(call).rejects.toThrow('caller gave up');
  });
});
