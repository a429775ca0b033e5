// The distance between a primary and its standby, where netem is not available: a TCP
// relay on loopback that holds every chunk for a fixed time in each direction before passing
// it on, put on the standby's replication connection. It runs in the coordinating process,
// which stands for the network; its CPU is counted as the coordinator's.
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import pg from 'pg';

/** One direction of a connection: chunks leave `delayMs` after they came, in order. */
class DelayedPipe {
  private readonly queue: { due: number; chunk: Buffer }[] = [];
  private timer: NodeJS.Timeout | null = null;
  private ended = false;

  constructor(
    private readonly from: Socket,
    private readonly to: Socket,
    private readonly delayMs: number,
  ) {
    from.on('data', (chunk: Buffer) => {
      this.queue.push({ due: performance.now() + delayMs, chunk });
      this.arm();
    });
    from.on('end', () => {
      this.ended = true;
      this.arm();
    });
  }

  private arm(): void {
    if (this.timer) return;
    const next = this.queue[0];
    if (!next) {
      if (this.ended) this.to.end();
      return;
    }
    // Timers fire no sooner than a millisecond: a shorter delay is at least that.
    this.timer = setTimeout(() => this.flush(), Math.max(0, next.due - performance.now()));
  }

  private flush(): void {
    this.timer = null;
    const now = performance.now();
    while (this.queue.length > 0 && this.queue[0]!.due <= now) {
      if (!this.to.write(this.queue.shift()!.chunk)) {
        this.from.pause();
        this.to.once('drain', () => this.from.resume());
      }
    }
    this.arm();
  }
}

export class DelayedLink {
  private readonly sockets = new Set<Socket>();
  private readonly server: Server;
  /** Where the standby connects instead of the primary (once started). */
  port = 0;

  private constructor(targetPort: number, delayMs: number) {
    this.server = createServer({ noDelay: true }, (client) => {
      const upstream = connect({ port: targetPort, host: '127.0.0.1', noDelay: true });
      for (const socket of [client, upstream]) {
        this.sockets.add(socket);
        socket.on('close', () => this.sockets.delete(socket));
        socket.on('error', () => {
          client.destroy();
          upstream.destroy();
        });
      }
      new DelayedPipe(client, upstream, delayMs);
      new DelayedPipe(upstream, client, delayMs);
    });
  }

  /** A relay to 127.0.0.1:`targetPort`, holding each chunk `delayMs` each way. */
  static async start(targetPort: number, delayMs: number): Promise<DelayedLink> {
    const link = new DelayedLink(targetPort, delayMs);
    await new Promise<void>((resolve, reject) => link.server.once('error', reject).listen(0, '127.0.0.1', resolve));
    link.port = (link.server.address() as AddressInfo).port;
    return link;
  }

  /**
   * What the link adds to a round trip, in ms: the median of `SELECT 1` through it less the
   * median straight to the primary (`url` names the primary's maintenance database).
   */
  async addedRoundTripMs(url: string, samples = 50): Promise<number> {
    const through = new URL(url);
    through.port = String(this.port);
    const median = async (connectionString: string) => {
      const client = new pg.Client({ connectionString });
      await client.connect();
      try {
        const times: number[] = [];
        for (let i = 0; i < samples; i++) {
          const started = performance.now();
          await client.query('SELECT 1');
          times.push(performance.now() - started);
        }
        times.sort((a, b) => a - b);
        return times[Math.floor(times.length / 2)]!;
      } finally {
        await client.end();
      }
    };
    return (await median(through.toString())) - (await median(url));
  }

  async stop(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
