// StateMirror: a worker's local copy of statelog's state (the informer / KTable idea).
// It takes the state at one offset (a snapshot any cache in front may answer), applies
// every later record, and when the connection drops or the server restarts resumes
// after the last offset it applied (watch() does the following). It takes a new
// snapshot only when the server says its offset can no longer be served (a reset), or
// when a snapshot was cut midway (what it had of that one is dropped). With a
// checkpoint file it restarts from disk and reads only the changes since. A token the
// server refuses (401, 403) stops it: `ready` rejects, and nothing is retried.
// A key with a time to live is dropped from view at its expiresAt, as the server's GET
// does, without waiting for its delete marker; it stays in the digest until that marker,
// as in the server's.
import { EventEmitter } from 'node:events';
import { digestHex, digestTerm } from '../../../src/contract/digest.js';
import { isExpired } from '../../../src/contract/expiry.js';
import { StatelogClient } from './client.js';
import type { ClientOptions, LogRecord } from './pages.js';
import { loadCheckpoint, saveCheckpoint } from './checkpoint.js';
import { StatelogError } from './errors.js';
import type { RetryPolicy } from './retry.js';
import type { WatchOptions } from './watch.js';
import { consumerOption, storedPosition } from './consumer-watch.js';

export interface StateMirrorOptions {
  url: string;
  token?: string;
  /** As the client's: the PEM CA of an https:// server with a private CA. */
  ca?: ClientOptions['ca'];
  /** As the client's: a client certificate and its key, for a server that asks for one. */
  cert?: ClientOptions['cert'];
  key?: ClientOptions['key'];
  /** Mirror only keys with this prefix. */
  prefix?: string;
  /** As watch()'s: long polls following `Link` (default), or the event stream. */
  follow?: WatchOptions['follow'];
  /** A file where offset and state are saved, and resumed from on start. */
  checkpoint?: string;
  /** How often the checkpoint is saved while changes arrive (default 5 s). */
  checkpointIntervalMs?: number;
  /**
   * A consumer the server keeps, to which the mirror commits the offsets it has applied
   * (operators see its lag; with `hold` compaction keeps the delete markers it has yet to
   * read), and from which it resumes. A position alone cannot restore the keys held in
   * memory, so the state comes from the checkpoint file when there is one (changes up to
   * the consumer's position are then applied without a 'change' event: they were handled),
   * else from a snapshot at or past the consumer's position.
   */
  consumer?: string | { name: string; hold?: boolean };
  retry?: Partial<RetryPolicy>;
  /** Where warnings go (a corrupt checkpoint, each reconnection and its cause); default console.warn. */
  warn?: (message: string) => void;
}

export interface ResetEvent {
  /** The server's code (offset_compacted, offset_ahead, epoch_changed). */
  reason: string;
}

export interface RetryEvent {
  /** Why the stream is opened again (unreachable, timeout, a 5xx...). */
  cause: StatelogError;
  delayMs: number;
}

/** The mirror's events and their arguments. */
export interface StateMirrorEvents<T> {
  /** The mirror holds the state at some offset (once). */
  ready: [];
  /** A record applied to the state. */
  change: [record: LogRecord<T>];
  /** A key reached its expiry: from now on get() and the rest leave it out (its delete marker follows as a change). */
  expire: [key: string];
  /** The state was replaced by a new snapshot, because the server could not serve the mirror's offset. */
  reset: [event: ResetEvent];
  /** The stream is opened again after `delayMs`. */
  retry: [event: RetryEvent];
  /** The checkpoint was saved at this offset. */
  checkpoint: [offset: number];
  /** A failure: transient ones (a retry follows), a checkpoint that could not be saved, or the one that stopped the mirror. */
  error: [error: Error];
}

interface StreamPosition {
  offset: number;
  epoch: string;
  /** The generation of the log's history the offset was read under (PostgreSQL). */
  gen?: string;
}

/** A comparison of the mirror's digest with the server's at one offset. */
export interface DigestCheck {
  ok: boolean;
  offset: number;
  /** The mirror's digest at `offset`, 16 hex digits. */
  mirror: string;
  /** The server's (a snapshot's trailer or /v1/stats). */
  server: string;
}

/** Emitted as 'error' when the mirror's state is not the server's: both digests are in `check`. */
export class DigestMismatchError extends Error {
  constructor(readonly check: DigestCheck) {
    super(`the mirror's digest at offset ${check.offset} is ${check.mirror}, the server's ${check.server}`);
    this.name = 'DigestMismatchError';
  }
}

/** How many (offset, digest) pairs the mirror keeps, so verify() can look back at the server's head. */
const DIGEST_HISTORY = 4096;

export class StateMirror<T = unknown> extends EventEmitter<StateMirrorEvents<T>> {
  /** Resolves once the mirror holds the state at some offset; rejects if the server refuses the token. */
  readonly ready: Promise<void>;
  /** Snapshots taken (the first one included). */
  snapshots = 0;
  private state = new Map<string, T>();
  /** The expiry of each key in `state` that has one (expired ones included, until their marker). */
  private expiries = new Map<string, number>();
  private expiryTimer: NodeJS.Timeout | undefined;
  /** When the timer is due (ms since the epoch); Infinity when none is set. */
  private expiryTimerAt = Infinity;
  /** Expiries up to this time were announced ('expire'). */
  private expiriesSwept = Date.now();
  /**
   * Each key's record offset and the digest they make (src/contract/digest.ts), kept as
   * records are applied; null when unknown (a checkpoint saved without offsets).
   */
  private offsets: Map<string, number> | null = new Map();
  private digestSum = 0n;
  /** The digest after each record applied lately, oldest first. */
  private digestHistory: { offset: number; digest: bigint }[] = [];
  private position: StreamPosition | null = null;
  private readonly client: StatelogClient;
  private readonly prefix: string;
  private readonly warn: (message: string) => void;
  private readonly stop = new AbortController();
  private resolveReady!: () => void;
  private rejectReady!: (err: Error) => void;
  private readyEmitted = false;
  private running: Promise<void>;
  private checkpointTimer: NodeJS.Timeout | undefined;
  private savedOffset = -1;
  /** Changes up to this offset are applied without a 'change' event: the consumer has handled them. */
  private handledThrough = -1;

  constructor(private readonly options: StateMirrorOptions) {
    super();
    this.client = new StatelogClient({
      url: options.url,
      ...(options.token ? { token: options.token } : {}),
      ...(options.ca !== undefined ? { ca: options.ca } : {}),
      ...(options.cert !== undefined && options.key !== undefined ? { cert: options.cert, key: options.key } : {}),
    });
    this.prefix = options.prefix ?? '';
    this.warn = options.warn ?? ((message) => console.warn(`statelog mirror: ${message}`));
    this.ready = new Promise((resolve, reject) => {
      this.resolveReady = resolve;
      this.rejectReady = reject;
    });
    // A rejected `ready` nobody awaits must not end the process (the 'error' event says it too).
    this.ready.catch(() => {});
    // 'error' events are informative here; without a listener EventEmitter would throw.
    this.on('error', () => {});
    this.running = this.run();
    if (options.checkpoint) {
      this.checkpointTimer = setInterval(() => void this.saveCheckpoint(), options.checkpointIntervalMs ?? 5_000);
      this.checkpointTimer.unref();
    }
  }

  get(key: string): T | undefined {
    return this.expired(key, Date.now()) ? undefined : this.state.get(key);
  }

  has(key: string): boolean {
    return this.state.has(key) && !this.expired(key, Date.now());
  }

  *entries(): IterableIterator<[string, T]> {
    const now = Date.now();
    for (const entry of this.state) if (!this.expired(entry[0], now)) yield entry;
  }

  *keys(): IterableIterator<string> {
    for (const [key] of this.entries()) yield key;
  }

  get size(): number {
    const now = Date.now();
    let expired = 0;
    for (const expiresAt of this.expiries.values()) if (isExpired(expiresAt, now)) expired += 1;
    return this.state.size - expired;
  }

  /** The key's expiry (ms since the epoch) while it is live and has one. */
  expiresAt(key: string): number | undefined {
    return this.has(key) ? this.expiries.get(key) : undefined;
  }

  private expired(key: string, now: number): boolean {
    return isExpired(this.expiries.get(key), now);
  }

  /** Notes a key's expiry (null: none) and makes sure the timer announces it. */
  private setExpiry(key: string, expiresAt: number | null | undefined): void {
    if (expiresAt == null) {
      this.expiries.delete(key);
      return;
    }
    this.expiries.set(key, expiresAt);
    if (expiresAt > this.expiriesSwept) this.armExpiryTimer(expiresAt);
  }

  private armExpiryTimer(at: number): void {
    if (at >= this.expiryTimerAt || this.stop.signal.aborted) return;
    clearTimeout(this.expiryTimer);
    this.expiryTimerAt = at;
    // Timers fire early by up to a millisecond: one more keeps the announcement after the expiry.
    this.expiryTimer = setTimeout(() => this.sweepExpiries(), Math.max(0, at - Date.now() + 1));
    this.expiryTimer.unref();
  }

  /** Announces the keys whose expiry came since the last sweep, and waits for the next one. */
  private sweepExpiries(): void {
    const now = Date.now();
    const since = this.expiriesSwept;
    this.expiriesSwept = now;
    this.expiryTimerAt = Infinity;
    let next = Infinity;
    const due: string[] = [];
    for (const [key, expiresAt] of this.expiries) {
      if (expiresAt > since && expiresAt <= now) due.push(key);
      else if (expiresAt > now && expiresAt < next) next = expiresAt;
    }
    for (const key of due) this.emit('expire', key);
    if (next !== Infinity) this.armExpiryTimer(next);
  }

  /** The log offset the mirror's state corresponds to (-1 before ready). */
  get offset(): number {
    return this.position?.offset ?? -1;
  }

  get epoch(): string | undefined {
    return this.position?.epoch;
  }

  /** The digest of the mirror's state at its offset (16 hex digits), or null when unknown. */
  get digest(): string | null {
    return this.offsets ? digestHex(this.digestSum) : null;
  }

  /**
   * Compares the mirror's digest with the server's: reads /v1/stats, waits until the
   * mirror has applied the server's head, and compares the digests at that offset. A
   * mismatch is also emitted as 'error' (DigestMismatchError). Only for a mirror of the
   * whole state (no prefix): the server's digest covers every key.
   */
  async verify(options: { timeoutMs?: number } = {}): Promise<DigestCheck> {
    if (this.prefix !== '') throw new Error('verify() needs a mirror of the whole state: the server has no digest per prefix');
    await this.ready;
    const stats = await this.client.stats();
    const target = stats.digestOffset;
    const deadline = Date.now() + (options.timeoutMs ?? 10_000);
    while (this.offset < target) {
      if (Date.now() > deadline) throw new Error(`the mirror did not reach offset ${target} in time (it is at ${this.offset})`);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    if (!this.offsets) throw new Error('the mirror has no digest: its checkpoint was saved without offsets');
    let local: bigint | undefined;
    for (const entry of this.digestHistory) if (entry.offset <= target) local = entry.digest;
    if (local === undefined) throw new Error(`the mirror no longer knows its digest at offset ${target}`);
    return this.checkDigest(target, digestHex(local), stats.digest);
  }

  private checkDigest(offset: number, mirror: string, server: string): DigestCheck {
    const check = { ok: mirror === server, offset, mirror, server };
    if (!check.ok) this.emit('error', new DigestMismatchError(check));
    return check;
  }

  private noteDigest(offset: number): void {
    if (this.digestHistory.length >= DIGEST_HISTORY) this.digestHistory.splice(0, DIGEST_HISTORY / 2);
    this.digestHistory.push({ offset, digest: this.digestSum });
  }

  /**
   * Replaces the state's offsets and digest (a snapshot, or a checkpoint: null offsets =
   * unknown); `known` is their digest when a checkpoint saved it, else it is computed.
   */
  private resetDigest(offsets: Map<string, number> | null, offset: number, known: bigint | null = null): void {
    this.offsets = offsets;
    let sum = known ?? 0n;
    if (known === null) for (const [key, at] of offsets ?? []) sum += digestTerm(key, at);
    this.digestSum = BigInt.asUintN(64, sum);
    this.digestHistory = [];
    this.noteDigest(offset);
  }

  /** Applies a record to the digest: - the key's old term, + the new one for a set. */
  private applyDigest(record: LogRecord<T>): void {
    if (!this.offsets) return;
    const old = this.offsets.get(record.key);
    if (old !== undefined) this.digestSum -= digestTerm(record.key, old);
    if (record.op === 'set') {
      this.digestSum += digestTerm(record.key, record.offset);
      this.offsets.set(record.key, record.offset);
    } else {
      this.offsets.delete(record.key);
    }
    this.digestSum = BigInt.asUintN(64, this.digestSum);
  }
  /** Stops following, and saves the checkpoint one last time. */
  async close(): Promise<void> {
    clearInterval(this.checkpointTimer);
    clearTimeout(this.expiryTimer);
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
        this.replaceExpiries(saved.expiries);
        this.position = { offset: saved.offset, epoch: saved.epoch, ...(saved.gen === undefined ? {} : { gen: saved.gen }) };
        this.resetDigest(saved.offsets, saved.offset, saved.digest);
        this.savedOffset = saved.offset;
      }
    }
    /** The snapshot being read, swapped in whole at its end so reads never see half of one. */
    let staging: Map<string, T> | null = null;
    let stagingOffsets: Map<string, number> | null = null;
    let stagingExpiries: Map<string, number> | null = null;
    let resetReason: string | null = null;
    const onRetry = (cause: StatelogError, delayMs: number): void => {
      this.warn(`${cause.message}; reconnecting in ${Math.round(delayMs)} ms`);
      this.emit('error', cause);
      this.emit('retry', { cause, delayMs });
    };
    const retry = this.options.retry ? { retry: this.options.retry } : {};
    try {
      const consumer = this.options.consumer ? consumerOption(this.options.consumer) : undefined;
      const stored = consumer ? await storedPosition(this.client, consumer.name, { signal: this.stop.signal, onRetry, ...retry }) : null;
      const events = this.client.watch<T>({
        prefix: this.prefix,
        ...this.startFrom(stored),
        onReset: 'snapshot',
        ...(this.options.follow ? { follow: this.options.follow } : {}),
        ...(consumer ? { consumer: { ...consumer, resume: false } } : {}),
        signal: this.stop.signal,
        ...retry,
        onRetry,
      });
      for await (const event of events) {
        switch (event.type) {
          case 'record':
            if (event.snapshot) {
              staging ??= new Map();
              stagingOffsets ??= new Map();
              stagingExpiries ??= new Map();
              if (event.record.op === 'set') {
                staging.set(event.record.key, event.record.value);
                stagingOffsets.set(event.record.key, event.record.offset);
                if (event.record.expiresAt !== undefined) stagingExpiries.set(event.record.key, event.record.expiresAt);
              }
            } else {
              this.apply(event.record);
            }
            break;
          case 'initialized':
            if (this.position === null || staging !== null || resetReason !== null) {
              const hadState = this.position !== null;
              this.state = staging ?? new Map();
              this.replaceExpiries(stagingExpiries ?? new Map());
              this.resetDigest(stagingOffsets ?? new Map(), event.offset);
              if (event.digest !== undefined) this.checkDigest(event.offset, digestHex(this.digestSum), event.digest);
              this.snapshots += 1;
              if (hadState && resetReason) this.emit('reset', { reason: resetReason });
            }
            staging = null;
            stagingOffsets = null;
            stagingExpiries = null;
            resetReason = null;
            this.position = { offset: event.offset, epoch: event.epoch, ...(event.gen === undefined ? {} : { gen: event.gen }) };
            this.markReady();
            break;
          case 'progress':
            if (this.position && event.offset > this.position.offset) this.position.offset = event.offset;
            if (this.position && event.gen !== undefined) this.position.gen = event.gen;
            break;
          case 'reset':
            // What comes after a reset is a new state: its changes were handled by no one.
            this.handledThrough = -1;
            staging = null;
            stagingOffsets = null;
            stagingExpiries = null;
            if (event.reason === 'snapshot_cut') {
              this.warn(`${event.error.message}; taking it again`);
            } else {
              this.warn(`${event.reason}: taking a new snapshot`);
              resetReason = event.reason;
            }
            break;
        }
      }
    } catch (err) {
      // 4xx other than a reset: a refused token, a bad prefix. The same request would get it again.
      if (this.stop.signal.aborted) return;
      const error = err instanceof Error ? err : new Error(String(err));
      this.warn(`stopped: ${error.message}`);
      this.rejectReady(error);
      this.emit('error', error);
    }
  }

  private apply(record: LogRecord<T>): void {
    if (this.position === null || record.offset <= this.position.offset) return; // applied already
    if (record.op === 'set') this.state.set(record.key, record.value);
    else this.state.delete(record.key);
    this.setExpiry(record.key, record.op === 'set' ? record.expiresAt : null);
    this.applyDigest(record);
    this.position.offset = record.offset;
    this.noteDigest(record.offset);
    if (record.offset > this.handledThrough) this.emit('change', record);
  }

  /**
   * Where the watch starts. With the checkpoint's state: after its offset, the changes up
   * to the consumer's position (of the same epoch) applied quietly; a checkpoint ahead of the
   * consumer is simply committed. Without one: a snapshot no older than the consumer's
   * position, as a restarted worker must not go back on what the group has handled.
   */
  private startFrom(stored: { offset: number; epoch: string } | null): Pick<WatchOptions, 'after' | 'epoch' | 'gen' | 'minOffset'> {
    const saved = this.position;
    if (saved) {
      if (stored && stored.epoch === saved.epoch && stored.offset > saved.offset) this.handledThrough = stored.offset;
      return { after: saved.offset, epoch: saved.epoch, ...(saved.gen === undefined ? {} : { gen: saved.gen }) };
    }
    return stored && stored.offset > 0 ? { minOffset: stored.offset, epoch: stored.epoch } : {};
  }

  /** Takes the expiries of a new state (a snapshot or a checkpoint); those already past are not announced. */
  private replaceExpiries(expiries: Map<string, number>): void {
    this.expiries = new Map();
    this.expiriesSwept = Date.now();
    for (const [key, expiresAt] of expiries) this.setExpiry(key, expiresAt);
  }

  private markReady(): void {
    this.resolveReady();
    if (!this.readyEmitted) {
      this.readyEmitted = true;
      this.emit('ready');
    }
  }

  private async saveCheckpoint(): Promise<void> {
    const file = this.options.checkpoint;
    if (!file || !this.position || this.position.offset === this.savedOffset) return;
    const { offset, epoch, gen } = this.position;
    try {
      const entries = [...this.state];
      const offsets = this.offsets;
      await saveCheckpoint(file, {
        offset,
        epoch,
        ...(gen === undefined ? {} : { gen }),
        prefix: this.prefix,
        entries,
        ...(offsets ? { offsets: entries.map(([key]) => offsets.get(key)!), digest: digestHex(this.digestSum) } : {}),
        expiries: entries.map(([key]) => this.expiries.get(key) ?? null),
      });
      this.savedOffset = offset;
      this.emit('checkpoint', offset);
    } catch (err) {
      this.emit('error', err as Error);
    }
  }
}
