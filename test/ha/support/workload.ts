// What runs against statelog's nodes while a failover happens: writers that retry every
// write with its Idempotency-Key until it is acknowledged, followers of every kind (a
// StateMirror by long poll and one by event stream, watch() by each), and /readyz sampled
// on every node. `check` then says what the scenario must show: no acknowledged write
// lost or applied twice, no follower gap or duplicate, every follower equal to the server.
import { StateMirror, StatelogClient, type WatchEvent } from '@statelog/client';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const RETRY = { baseDelayMs: 50, maxDelayMs: 500 };

export interface Attempt {
  at: number;
  status: number | 'network';
  outcome?: string;
  code?: string;
}

/** One writer: batches of a key of its own and the scenario's shared counter. */
class Writer {
  /** The last acknowledged value of each of its keys. */
  readonly last = new Map<string, number>();
  acked = 0;
  replayed = 0;
  readonly failures: Attempt[] = [];
  readonly unexpected: string[] = [];
  /** When each acknowledgement arrived. */
  readonly ackTimes: number[] = [];
  private stopped = false;
  readonly done: Promise<void>;

  constructor(
    private readonly urls: string[],
    private readonly ns: string,
    private readonly id: number,
  ) {
    this.done = this.run();
  }

  stop(): Promise<void> {
    this.stopped = true;
    return this.done;
  }

  private async run(): Promise<void> {
    for (let i = 0; !this.stopped; i++) {
      const key = `${this.ns}/w${this.id}/k${i % 4}`;
      const body = JSON.stringify({ records: [{ key, value: i }, { key: `${this.ns}/count`, op: 'incr', by: 1 }] });
      // The same write, with the same key, until it is acknowledged: never given up.
      for (let attempt = 0; ; attempt++) {
        const url = this.urls[(this.id + attempt) % this.urls.length]!;
        let res: Response;
        try {
          res = await fetch(`${url}/v1/records`, {
            method: 'POST',
            headers: { 'content-type': 'application/json', 'idempotency-key': `${this.ns}-w${this.id}-${i}` },
            body,
            signal: AbortSignal.timeout(30_000),
          });
        } catch {
          this.failures.push({ at: Date.now(), status: 'network' });
          await sleep(100);
          continue;
        }
        const answer = (await res.json().catch(() => ({}))) as { error?: { code?: string; outcome?: string } };
        if (res.status === 200) {
          if (res.headers.get('idempotent-replayed') === 'true') this.replayed += 1;
          this.acked += 1;
          this.last.set(key, i);
          this.ackTimes.push(Date.now());
          break;
        }
        this.failures.push({ at: Date.now(), status: res.status, outcome: answer.error?.outcome, code: answer.error?.code });
        if (res.status !== 503) this.unexpected.push(`${res.status} ${JSON.stringify(answer)}`);
        await sleep(100);
      }
    }
  }
}

interface Sample {
  at: number;
  node: number;
  status: number | 'network';
  reason?: string;
  ms: number;
}

/** A watch() whose events are checked as they come: a snapshot, then consecutive offsets. */
class Watcher {
  readonly state = new Map<string, unknown>();
  offset = -1;
  resets: string[] = [];
  readonly problems: string[] = [];
  private readonly stop = new AbortController();
  readonly done: Promise<void>;

  constructor(client: StatelogClient, follow: 'changes' | 'stream') {
    this.done = (async () => {
      for await (const event of client.watch({ follow, signal: this.stop.signal, retry: RETRY })) this.apply(event);
    })().catch((error: unknown) => {
      if (!this.stop.signal.aborted) this.problems.push(`watch ended: ${String(error)}`);
    });
  }

  private apply(event: WatchEvent): void {
    if (event.type === 'reset') {
      this.resets.push(`${event.reason} (watch at ${this.offset}: ${event.error.message})`);
      this.state.clear();
      this.offset = -1;
    } else if (event.type === 'initialized') {
      this.offset = event.offset;
    } else if (event.type === 'record') {
      const { record } = event;
      if (!event.snapshot) {
        if (record.offset !== this.offset + 1) this.problems.push(`after ${this.offset} came ${record.offset}`);
        this.offset = record.offset;
      }
      if (record.op === 'delete') this.state.delete(record.key);
      else this.state.set(record.key, record.value);
    }
  }

  close(): Promise<void> {
    this.stop.abort();
    return this.done;
  }
}

export class Workload {
  private readonly writers: Writer[];
  readonly samples: Sample[] = [];
  private readonly sampling: NodeJS.Timeout;
  readonly mirrors: StateMirror[];
  readonly mirrorResets: string[][] = [[], []];
  readonly watchers: Watcher[];
  private readonly clients: StatelogClient[];

  private constructor(
    readonly urls: string[],
    readonly ns: string,
    writers: number,
  ) {
    this.clients = urls.map((url) => new StatelogClient({ url, retry: RETRY }));
    // One of each kind of follower, spread over the nodes.
    this.mirrors = [
      new StateMirror({ url: urls[0]!, follow: 'changes', retry: RETRY, warn: () => {} }),
      new StateMirror({ url: urls[1 % urls.length]!, follow: 'stream', retry: RETRY, warn: () => {} }),
    ];
    this.mirrors.forEach((mirror, i) => mirror.on('reset', (event: { reason: string }) => this.mirrorResets[i]!.push(`${event.reason} (mirror ${i})`)));
    this.watchers = [new Watcher(this.clients[1 % urls.length]!, 'changes'), new Watcher(this.clients[0]!, 'stream')];
    this.writers = Array.from({ length: writers }, (_, id) => new Writer(urls, ns, id));
    this.sampling = setInterval(() => void this.sample(), 200);
  }

  /** Starts followers (once they hold a snapshot) and then writers. */
  static async start(urls: string[], ns: string, writers = 3): Promise<Workload> {
    const workload = new Workload(urls, ns, writers);
    await Promise.all(workload.mirrors.map((mirror) => mirror.ready));
    return workload;
  }

  private async sample(): Promise<void> {
    await Promise.all(
      this.urls.map(async (url, node) => {
        const started = performance.now();
        try {
          const res = await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(5000) });
          const body = (await res.json().catch(() => ({}))) as { error?: { reason?: string } };
          this.samples.push({ at: Date.now(), node, status: res.status, reason: body.error?.reason, ms: performance.now() - started });
        } catch {
          this.samples.push({ at: Date.now(), node, status: 'network', ms: performance.now() - started });
        }
      }),
    );
  }

  /** Acknowledgements so far, over every writer. */
  acked(): number {
    return this.writers.reduce((sum, writer) => sum + writer.acked, 0);
  }

  /** Resolves once `more` writes beyond those acknowledged now are acknowledged. */
  async progress(more: number, timeoutMs: number): Promise<void> {
    const target = this.acked() + more;
    const deadline = Date.now() + timeoutMs;
    while (this.acked() < target) {
      if (Date.now() > deadline) throw new Error(`writes did not progress: ${this.acked()} of ${target} within ${timeoutMs} ms`);
      await sleep(50);
    }
  }

  /** The longest time between two acknowledgements of any writer, and when it ended. */
  pause(): { ms: number; endedAt: number } {
    const times = this.writers.flatMap((writer) => writer.ackTimes).sort((a, b) => a - b);
    let longest = { ms: 0, endedAt: times[0] ?? 0 };
    for (let i = 1; i < times.length; i++) if (times[i]! - times[i - 1]! > longest.ms) longest = { ms: times[i]! - times[i - 1]!, endedAt: times[i]! };
    return longest;
  }

  failures(): Attempt[] {
    return this.writers.flatMap((writer) => writer.failures);
  }

  /**
   * Stops writing, waits for every follower to reach the head, stops following, and
   * returns what the scenario must hold.
   */
  async finish(): Promise<Outcome> {
    await Promise.all(this.writers.map((writer) => writer.stop()));
    clearInterval(this.sampling);
    const client = this.clients[0]!;
    const state = new Map<string, unknown>();
    const snapshot = await client.snapshot();
    for await (const entry of snapshot) state.set(entry.key, entry.value);
    const head = snapshot.offset;
    const deadline = Date.now() + 20_000;
    while (this.mirrors.some((m) => m.offset < head) || this.watchers.some((w) => w.offset < head)) {
      if (Date.now() > deadline) break;
      await sleep(50);
    }
    const mirrorsEqual = this.mirrors.map((mirror) => equal(new Map(mirror.entries()), state));
    const watchersEqual = this.watchers.map((watcher) => equal(watcher.state, state));
    for (const mirror of this.mirrors) await mirror.close();
    for (const watcher of this.watchers) await watcher.close();

    // Every writer's keys hold its last acknowledged value; the counter counts each write once.
    const lost: string[] = [];
    for (const writer of this.writers) {
      for (const [key, value] of writer.last) if (state.get(key) !== value) lost.push(`${key}: acknowledged ${value}, holds ${JSON.stringify(state.get(key))}`);
    }
    const outcome: Outcome = {
      head,
      acked: this.acked(),
      counter: state.get(`${this.ns}/count`) as number,
      replayed: this.writers.reduce((sum, writer) => sum + writer.replayed, 0),
      lost,
      unexpected: this.writers.flatMap((writer) => writer.unexpected),
      failures: this.failures(),
      mirrorsEqual,
      watchersEqual,
      mirrorOffsets: this.mirrors.map((m) => m.offset),
      watcherOffsets: this.watchers.map((w) => w.offset),
      resets: [...this.mirrorResets.flat(), ...this.watchers.flatMap((w) => w.resets)],
      followerProblems: this.watchers.flatMap((w) => w.problems),
      samples: this.samples,
    };
    await Promise.all(this.clients.map((c) => c.close()));
    return outcome;
  }
}

export interface Outcome {
  head: number;
  acked: number;
  counter: number;
  replayed: number;
  lost: string[];
  unexpected: string[];
  failures: Attempt[];
  mirrorsEqual: boolean[];
  watchersEqual: boolean[];
  mirrorOffsets: number[];
  watcherOffsets: number[];
  resets: string[];
  followerProblems: string[];
  samples: Sample[];
}

function equal(a: Map<string, unknown>, b: Map<string, unknown>): boolean {
  if (a.size !== b.size) return false;
  for (const [key, value] of a) if (JSON.stringify(b.get(key)) !== JSON.stringify(value)) return false;
  return true;
}

/**
 * Every record a node serves from offset 0, page by page, following its `Link: next` as a
 * reader does (the link names the log's generation once a failover started a new one).
 */
export async function servedRecords(url: string): Promise<Array<{ offset: number; key: string; value?: unknown }>> {
  const out: Array<{ offset: number; key: string; value?: unknown }> = [];
  for (let path = '/v1/changes?after=0&limit=1000'; ; ) {
    // A 503 is "retry later", as for any reader: the cluster may still be settling.
    let res = await fetch(`${url}${path}`);
    for (const deadline = Date.now() + 30_000; res.status === 503 && Date.now() < deadline; res = await fetch(`${url}${path}`)) {
      await res.arrayBuffer();
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    if (res.status !== 200) throw new Error(`GET ${path}: ${res.status} ${await res.text()}`);
    const body = (await res.json()) as { records: Array<{ offset: number; key: string; value?: unknown }> };
    if (body.records.length === 0) return out;
    for (const { offset, key, value } of body.records) out.push({ offset, key, value });
    const next = res.headers.get('link')?.match(/<([^>]+)>;\s*rel="next"/)?.[1];
    if (!next) throw new Error(`GET ${path}: no Link next`);
    const link = new URL(next, url);
    path = `${link.pathname}${link.search}`;
  }
}
