// TCP proxies in front of a real server, for tests of what a broken network does.
// - flakyProxy: for the first `drops` requests, lets the request reach the server and
//   then cuts the client's connection before the answer: the client cannot know whether
//   its write was applied.
// - cuttableProxy: relays everything until cut(), which drops every open connection and
//   refuses new ones (as a database that went down, or a cut network), until restore();
//   or until stall(), after which it silently drops every byte either way and closes
//   nothing (as a network that loses packets), until restore().
import { createServer, connect, type AddressInfo, type Server, type Socket } from 'node:net';

export interface FlakyProxy {
  url: string;
  /** Requests whose answers were cut. */
  cut: number;
  close(): Promise<void>;
}

/** A listening TCP relay that keeps track of its sockets, so that it can drop them all. */
class Relay {
  readonly sockets = new Set<Socket>();
  server: Server;

  constructor(
    private readonly target: { host: string; port: number },
    private readonly onPair: (client: Socket, upstream: Socket) => void,
  ) {
    this.server = this.newServer();
  }

  private newServer(): Server {
    return createServer((client) => {
      const upstream = connect(this.target.port, this.target.host);
      for (const socket of [client, upstream]) {
        this.sockets.add(socket);
        socket.on('close', () => this.sockets.delete(socket));
      }
      upstream.on('end', () => client.end());
      upstream.on('error', () => client.destroy());
      client.on('error', () => upstream.destroy());
      this.onPair(client, upstream);
    });
  }

  listen(port = 0): Promise<number> {
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(port, '127.0.0.1', () => resolve((this.server.address() as AddressInfo).port));
    });
  }

  /** Stops listening (new connections are refused) and drops every open connection. */
  stop(): Promise<void> {
    return new Promise((resolve) => {
      this.server.close(() => resolve());
      for (const socket of this.sockets) socket.destroy();
    });
  }

  /** Listens again on the same port. */
  async resume(port: number): Promise<void> {
    this.server = this.newServer();
    await this.listen(port);
  }
}

export async function flakyProxy(target: string, drops: number): Promise<FlakyProxy> {
  const { hostname, port } = new URL(target);
  const state = { cut: 0 };
  const relay = new Relay({ host: hostname, port: Number(port) }, (client, upstream) => {
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
  });
  const listening = await relay.listen();
  return {
    url: `http://127.0.0.1:${listening}`,
    get cut() {
      return state.cut;
    },
    // Clients keep connections alive; the proxy ends them itself.
    close: () => relay.stop(),
  };
}

export interface CuttableProxy {
  /** The proxy's port on 127.0.0.1. */
  port: number;
  /** Connections relayed so far. */
  readonly connections: number;
  /** Drops every open connection and refuses new ones (ECONNREFUSED) until restore(). */
  cut(): Promise<void>;
  /** Keeps every connection open, and accepts new ones, but relays nothing either way. */
  stall(): void;
  /** Accepts and relays connections again, on the same port, after cut() or stall(). */
  restore(): Promise<void>;
  /** Drops every open connection and relays new ones to another address (a proxy that switched). */
  retarget(host: string, port: number): Promise<void>;
  close(): Promise<void>;
}

/** A plain TCP relay to `host:port` that a test can cut and restore. */
export async function cuttableProxy(host: string, port: number): Promise<CuttableProxy> {
  let connections = 0;
  let stalled = false;
  const target = { host, port };
  const relay = new Relay(target, (client, upstream) => {
    connections += 1;
    client.on('data', (chunk: Buffer) => stalled || upstream.write(chunk));
    upstream.on('data', (chunk: Buffer) => stalled || client.write(chunk));
    client.on('end', () => upstream.end());
  });
  const listening = await relay.listen();
  let up = true;
  const proxy: CuttableProxy = {
    port: listening,
    get connections() {
      return connections;
    },
    async cut() {
      if (!up) return;
      up = false;
      await relay.stop();
    },
    stall() {
      stalled = true;
    },
    async restore() {
      stalled = false;
      if (up) return;
      up = true;
      await relay.resume(listening);
    },
    async retarget(newHost, newPort) {
      target.host = newHost;
      target.port = newPort;
      await proxy.cut();
      await proxy.restore();
    },
    async close() {
      if (up) await relay.stop();
      up = false;
    },
  };
  return proxy;
}
