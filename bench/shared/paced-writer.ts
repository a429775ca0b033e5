// An open-loop HTTP writer: PUTs at a fixed rate whatever the answers' latency (so a slow
// server is measured, not hidden by a client that waits), over keep-alive connections.
import { Agent, request } from 'node:http';

export interface WriteSample {
  /** performance.now() when the request was sent. */
  sentAt: number;
  ms: number;
  status: number;
}

export class PacedWriter {
  readonly samples: WriteSample[] = [];
  private readonly agent = new Agent({ keepAlive: true, maxSockets: 256 });
  private timer: NodeJS.Timeout | null = null;
  private inFlight = new Set<Promise<void>>();
  private sent = 0;
  private startedAt = 0;

  constructor(
    private readonly url: string,
    private readonly perSecond: number,
    private readonly keys: number,
    private readonly keyName: (index: number) => string,
  ) {}

  start(): void {
    this.startedAt = performance.now();
    this.timer = setInterval(() => {
      const due = Math.floor(((performance.now() - this.startedAt) / 1000) * this.perSecond);
      while (this.sent < due) this.send(this.sent++);
    }, 1);
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await Promise.all(this.inFlight);
    this.agent.destroy();
  }

  /** The samples sent between two performance.now() readings. */
  between(from: number, to: number): WriteSample[] {
    return this.samples.filter((s) => s.sentAt >= from && s.sentAt < to);
  }

  private send(n: number): void {
    const key = this.keyName(Math.floor(Math.random() * this.keys));
    const body = JSON.stringify({ value: { n, at: Date.now() } });
    const sentAt = performance.now();
    const done = new Promise<void>((resolve) => {
      const req = request(
        `${this.url}/v1/keys/${key}`,
        { method: 'PUT', agent: this.agent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } },
        (res) => {
          res.resume();
          res.on('end', () => {
            this.samples.push({ sentAt, ms: performance.now() - sentAt, status: res.statusCode ?? 0 });
            resolve();
          });
        },
      );
      req.on('error', () => {
        this.samples.push({ sentAt, ms: performance.now() - sentAt, status: 0 });
        resolve();
      });
      req.end(body);
    });
    this.inFlight.add(done);
    void done.then(() => this.inFlight.delete(done));
  }
}
