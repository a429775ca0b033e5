// A TCP proxy in front of a real server that, for the first `drops` requests, lets the
// request reach the server and then cuts the client's connection before the answer:
// the client cannot know whether its write was applied.
import { createServer, connect, type AddressInfo, type Server, type Socket } from 'node:net';

export interface FlakyProxy {
  url: string;
  /** Requests whose answers were cut. */
  cut: number;
  close(): Promise<void>;
}

export async function flakyProxy(target: string, drops: number): Promise<FlakyProxy> {
  const { hostname, port } = new URL(target);
  const state = { cut: 0 };
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    const upstream = connect(Number(port), hostname);
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
    }
    client.pipe(upstream);
    let cutThis = false;
    upstream.on('data', (chunk) => {
      if (!cutThis && state.cut < drops) {
        // The server answered, so the request was processed: drop the answer.
        cutThis = true;
        state.cut++;
        client.destroy();
        upstream.destroy();
        return;
      }
      if (!cutThis) client.write(chunk);
    });
    upstream.on('end', () => client.end());
    upstream.on('error', () => client.destroy());
    client.on('error', () => upstream.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    get cut() {
      return state.cut;
    },
    close: () =>
      new Promise((resolve) => {
        server.close(() => resolve());
        // Clients keep connections alive; the proxy ends them itself.
        for (const socket of sockets) socket.destroy();
      }),
  };
}
