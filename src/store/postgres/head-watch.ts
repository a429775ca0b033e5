// Learns of other nodes' commits by LISTEN/NOTIFY, and by a periodic read of the meta row, so that a
// lost notification (a broken connection) only delays a wake-up.
import pg from 'pg';
import type { LogPosition } from '../log-store.js';
import { CHANGES_CHANNEL } from './sql.js';

export interface HeadWatchOptions {
  /** This node's id in notification payloads: its own commits are not news. */
  node: string;
  client: pg.ClientConfig;
  read(): Promise<LogPosition>;
  /** Called with a head another node notified; the store keeps the highest. */
  learn(position: { head: number }): void;
  /** Called with the meta row as read. */
  learnRead(position: LogPosition): void;
  onError(err: Error): void;
  catchUpMs: number;
  reconnectMs?: number;
}

export class HeadWatch {
  private listener: pg.Client | null = null;
  private timer: NodeJS.Timeout | null = null;
  private reconnect: NodeJS.Timeout | null = null;
  private catchingUp = false;
  private closed = false;

  constructor(private readonly options: HeadWatchOptions) {}

  async start(): Promise<void> {
    await this.listen();
    this.timer = setInterval(() => void this.catchUp(), this.options.catchUpMs).unref();
  }

  private async listen(): Promise<void> {
    const client = new pg.Client(this.options.client);
    client.on('notification', (message) => {
      const [head, node] = (message.payload ?? '').split(' ');
      if (node !== this.options.node && Number.isSafeInteger(Number(head))) this.options.learn({ head: Number(head) });
    });
    // A broken connection emits 'error' and then 'end': listen again after a pause.
    client.on('error', (err) => this.options.onError(err));
    client.on('end', () => {
      if (this.listener === client) this.listener = null;
      this.scheduleListen();
    });
    try {
      await client.connect();
      await client.query(`LISTEN ${CHANGES_CHANNEL}`);
    } catch (err) {
      client.removeAllListeners('end');
      await client.end().catch(() => {});
      throw err;
    }
    if (this.closed) {
      await client.end().catch(() => {});
      return;
    }
    this.listener = client;
    // Commits made while no connection listened are learnt now.
    await this.catchUp();
  }

  private scheduleListen(): void {
    if (this.closed || this.reconnect) return;
    this.reconnect = setTimeout(() => {
      this.reconnect = null;
      this.listen().catch((err: Error) => {
        this.options.onError(err);
        this.scheduleListen();
      });
    }, this.options.reconnectMs ?? 1000).unref();
  }

  /** Reads the meta row now. Never throws: a failure is reported and the next period retries. */
  async catchUp(): Promise<void> {
    if (this.catchingUp || this.closed) return;
    this.catchingUp = true;
    try {
      this.options.learnRead(await this.options.read());
    } catch (err) {
      if (!this.closed) this.options.onError(err as Error);
    } finally {
      this.catchingUp = false;
    }
  }

  async stop(): Promise<void> {
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    if (this.reconnect) clearTimeout(this.reconnect);
    const listener = this.listener;
    this.listener = null;
    if (listener) {
      listener.removeAllListeners('end');
      await listener.end().catch(() => {});
    }
  }
}
