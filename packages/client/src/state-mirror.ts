// StateMirror: a worker's local copy of statelog's state (the informer / KTable idea).
// It takes the state at one offset from the change stream with snapshot=true, applies
// every later record, reconnects with jittered backoff and resumes from the last
// offset it applied, and starts over (emitting 'reset') when the server says that
// offset can no longer be served. With a checkpoint file it restarts from disk and
// reads only the changes since.
import { EventEmitter } from 'node:events';
import { StatelogClient, type ClientOptions, type LogRecord } from './client.js';
import { loadCheckpoint, saveCheckpoint } from './checkpoint.js';
import { StatelogError } from './errors.js';
import { backoffDelay, DEFAULT_RETRY, sleep, type RetryPolicy } from './retry.js';
import { readEvents } from './sse.js';

export interface StateMirrorOptions {
  url: string;
  token?: string;
  /** As the client's: the PEM CA of an https:// server with a private CA. */
  ca?: ClientOptions['ca'];
  /** Mirror only keys with this prefix. */
  prefix?: string;
  /** A file where offset and state are saved, and resumed from on start. */
  checkpoint?: string;
  /** How often the checkpoint is saved while changes arrive (default 5 s). */
  checkpointIntervalMs?: number;
  retry?: Partial<RetryPolicy>;
  /** Where warnings go (a corrupt checkpoint, a reconnect); default console.warn. */
  warn?: (message: string) => void;
}

export interface ResetEvent {
  reason: string;
}

interface StreamPosition {
  offset: number;
  epoch: string;
}

/** Events: 'ready', 'change' (record), 'reset' ({ reason }), 'checkpoint' (offset), 'error' (transient). */
export class StateMirror<T = unknown> extends EventEmitter {
  /** Resolves once the mirror holds the state at some offset. */
  readonly ready: Promise<void>;
  private state = new Map<string, T>();
  private position: StreamPosition | null = null;
  private readonly client: StatelogClient;
  private readonly prefix: string;
  private readonly retry: RetryPolicy;
  private readonly warn: (message: string) => void;
  private readonly stop = new AbortController();
  private resolveReady!: () => void;
  private running: Promise<void>;
  private checkpointTimer: NodeJS.Timeout | undefined;
  private savedOffset = -1;

  constructor(private readonly options: StateMirrorOptions) {
    super();
    this.client = new StatelogClient({
      url: options.url,
      ...(options.token ? { token: options.token } : {}),
      ...(options.ca !== undefined ? { ca: options.ca } : {}),
    });
    this.prefix = options.prefix ?? '';
    this.retry = { ...DEFAULT_RETRY, ...options.retry };
    this.warn = options.warn ?? ((message) => console.warn(`statelog mirror: ${message}`));
    this.ready = new Promise((resolve) => (this.resolveReady = resolve));
    // 'error' events are informative here; without a listener EventEmitter would throw.
    this.on('error', () => {});
    this.running = this.run();
    if (options.checkpoint) {
      this.checkpointTimer = setInterval(() => void this.saveCheckpoint(), options.checkpointIntervalMs ?? 5_000);
      this.checkpointTimer.unref();
    }
  }

  get(key: string): T | undefined {
    return this.state.get(key);
  }

  has(key: string): boolean {
    return this.state.has(key);
  }

  entries(): IterableIterator<[string, T]> {
    return this.state.entries();
  }

  keys(): IterableIterator<string> {
    return this.state.keys();
  }

  get size(): number {
    return this.state.size;
  }

  /** The log offset the mirror's state corresponds to (-1 before ready). */
  get offset(): number {
    return this.position?.offset ?? -1;
  }

  get epoch(): string | undefined {
    return this.position?.epoch;
  }

  /** Stops following, and saves the checkpoint one last time. */
  async close(): Promise<void> {
    clearInterval(this.checkpointTimer);
    this.stop.abort();
    await this.running;
    await this.saveCheckpoint();
    await this.client.close();
  }

  private async run(): Promise<void> {
    if (this.options.checkpoint) {
      const saved = await loadCheckpoint<T>(this.options.checkpoint, this.prefix, this.warn);
      if (saved) {
        this.state = saved.state;
        this.position = { offset: saved.offset, epoch: saved.epoch };
        this.savedOffset = saved.offset;
      }
    }
    // A resumed position is only trusted once the server accepts it.
    let resumable = this.position !== null;
    for (let attempt = 0; !this.stop.signal.aborted; ) {
      try {
        const progressed = resumable ? await this.follow() : await this.snapshotAndFollow();
        resumable = true;
        if (progressed) attempt = 0;
      } catch (err) {
        if (this.stop.signal.aborted) break;
        if (err instanceof StatelogError && err.mustResnapshot) {
          this.warn(`${err.code}: taking a new snapshot`);
          resumable = false;
          this.pendingReset = err.code;
          continue;
        }
        this.emit('error', err);
      }
      if (this.stop.signal.aborted) break;
      await sleep(backoffDelay(attempt++, this.retry), this.stop.signal).catch(() => {});
    }
  }

  /** Why the next snapshot replaces the state (null on the first one). */
  private pendingReset: string | null = null;

  /** Opens the stream with snapshot=true; swaps the state in at snapshot-end. */
  private async snapshotAndFollow(): Promise<boolean> {
    const res = await this.client.open('/v1/changes/stream', { snapshot: 'true', prefix: this.prefix }, {}, this.stop.signal);
    const staging = new Map<string, T>();
    let inSnapshot = true;
    let progressed = false;
    for await (const event of readEvents(res.body!)) {
      if (inSnapshot) {
        if (event.event === 'record') {
          const record = JSON.parse(event.data) as LogRecord<T>;
          if (record.op === 'set') staging.set(record.key, record.value);
        } else if (event.event === 'snapshot-end') {
          const end = JSON.parse(event.data) as StreamPosition;
          const hadState = this.position !== null;
          this.state = staging;
          this.position = { offset: end.offset, epoch: end.epoch };
          inSnapshot = false;
          progressed = true;
          if (hadState) this.emit('reset', { reason: this.pendingReset ?? 'resynchronised' } satisfies ResetEvent);
          this.pendingReset = null;
          this.markReady();
        } else if (event.event === 'reset') {
          throw resetError(event.data);
        }
        continue;
      }
      progressed = this.handleLive(event) || progressed;
    }
    return progressed;
  }

  /** Resumes after the mirror's offset in its epoch. */
  private async follow(): Promise<boolean> {
    const { offset, epoch } = this.position!;
    const res = await this.client.open(
      '/v1/changes/stream',
      { after: offset, prefix: this.prefix, epoch },
      { 'last-event-id': String(offset) },
      this.stop.signal,
    );
    const served = res.headers.get('x-log-epoch');
    if (served && served !== epoch) {
      await res.body?.cancel();
      throw new StatelogError(410, 'epoch_changed', `the server's epoch is ${served}, the mirror's ${epoch}`);
    }
    this.markReady();
    let progressed = false;
    for await (const event of readEvents(res.body!)) progressed = this.handleLive(event) || progressed;
    return progressed;
  }

  private handleLive(event: { id: string | undefined; event: string; data: string }): boolean {
    switch (event.event) {
      case 'record': {
        const record = JSON.parse(event.data) as LogRecord<T>;
        if (record.offset <= this.position!.offset) return false; // already applied
        if (record.op === 'set') this.state.set(record.key, record.value);
        else this.state.delete(record.key);
        this.position!.offset = record.offset;
        this.emit('change', record);
        return true;
      }
      case 'progress': {
        const { offset } = JSON.parse(event.data) as { offset: number };
        if (offset > this.position!.offset) this.position!.offset = offset;
        return true;
      }
      case 'reset':
        throw resetError(event.data);
      default:
        return false;
    }
  }

  private markReady(): void {
    this.resolveReady();
    if (this.listenerCount('ready') > 0 && !this.readyEmitted) {
      this.readyEmitted = true;
      this.emit('ready');
    }
  }

  private readyEmitted = false;

  private async saveCheckpoint(): Promise<void> {
    const file = this.options.checkpoint;
    if (!file || !this.position || this.position.offset === this.savedOffset) return;
    const { offset, epoch } = this.position;
    try {
      await saveCheckpoint(file, { offset, epoch, prefix: this.prefix, entries: [...this.state] });
      this.savedOffset = offset;
      this.emit('checkpoint', offset);
    } catch (err) {
      this.emit('error', err);
    }
  }
}

function resetError(data: string): StatelogError {
  const { error } = JSON.parse(data) as { error: { code: string; message: string } & Record<string, unknown> };
  const { code, message, ...details } = error;
  return new StatelogError(410, code, message, details);
}
