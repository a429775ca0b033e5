// The events of one change stream, one at a time as the socket asks for them: an optional
// snapshot phase, then records by offset for ever; routes/change-stream.ts frames them.
import { RepeatedWaiter, type ChangeNotifier } from './change-notifier.js';
import type { FeedPage } from './change-feed.js';
import { ApiError, type ErrorBody } from '../contract/errors.js';
import { showsEverything, type ReadFilter, type ScopeChange } from '../contract/key-scope.js';
import { parseGenerationToken } from '../contract/lineage.js';
import { SnapshotDigest } from '../snapshot/snapshot-digest.js';
import type { SnapshotReader } from '../store/log-store.js';
import type { TailPages } from './tail-pages.js';

/** Rows and characters a chunk: a slow reader holds little, and a chunk stays out of V8's large-object space. */
const PAGE_ROWS = 1000;
const PAGE_CHARS = 64 * 1024;
/** The contract's bound on the time between progress events. */
const PROGRESS_INTERVAL_MS = 15_000;

/** In order: `open`, a snapshot's `snapshot-records` and `snapshot-end`, then `records` and `progress` until a `reset`. */
export type ChangeStreamEvent<Page> =
  | { type: 'open' }
  /** Snapshot lines (records' JSON), sent without ids. */
  | { type: 'snapshot-records'; lines: string[] }
  | { type: 'snapshot-end'; offset: number; epoch: string; gen?: string; digest: string }
  /** A page of the log as the tail rendered it, with a progress event when the reader moved past it. */
  | { type: 'records'; page: Page; progress?: number; gen?: string }
  | { type: 'progress'; offset: number; gen?: string }
  | { type: 'reset'; body: ErrorBody };

export interface ChangeStreamOptions<Page> {
  tail: TailPages<Page>;
  notifier: ChangeNotifier;
  prefix: string;
  key?: string;
  /** Only keys with one of these prefixes (each starting with `prefix`): a token's scope. */
  within?: readonly string[];
  epoch: string;
  /** The generation the reader was served under (or the snapshot's): checked at every read. */
  gen?: string | undefined;
  /** Where a stream without a snapshot starts (exclusive). */
  after: number;
  snapshot: SnapshotReader | null;
  signal: AbortSignal;
}

/** A `reset` event's data: the 410's body with the horizon and epoch, so that a reader knows where to start again. */
export function resetBody(err: ApiError, horizon: number, epoch: string): ErrorBody {
  const body = err.toBody();
  return { error: { ...body.error, horizon: body.error.horizon ?? horizon, epoch: body.error.epoch ?? epoch } };
}

type Phase = 'open' | 'snapshot' | 'live' | 'done';

export class ChangeStreamSource<Page> {
  private phase: Phase = 'open';
  /** Every record up to here has been sent, or the reader has been told to skip it. */
  private position: number;
  private lastProgressAt = Date.now();
  private readonly waiter: RepeatedWaiter;
  /** The generation of what the reader holds; a change is sent with the next progress event. */
  private gen: string | undefined;
  /** The keys it shows: the request's, narrowed by a reload of the credentials. */
  private filter: ReadFilter;
  /** Set by a reload that refused the reader: the next event is the reset that ends the stream. */
  private refusal: ApiError | null = null;
  /** Moved by each change of scope: a page read under an earlier one is dropped. */
  private scopeVersion = 0;

  constructor(private readonly options: ChangeStreamOptions<Page>) {
    this.position = options.after;
    this.gen = options.gen;
    this.waiter = new RepeatedWaiter(options.notifier, options.signal);
    const { prefix, key, within } = options;
    this.filter = { prefix, ...(key !== undefined ? { key } : {}), ...(within !== undefined ? { within } : {}) };
  }

  /**
   * After a reload of the credentials: from the next record on, only the narrowed scope's keys; or a
   * reset that ends the stream. A snapshot under way was read for the old scope, so it ends too.
   */
  rescope(change: ScopeChange): void {
    const inSnapshot = this.phase === 'snapshot' || (this.phase === 'open' && this.options.snapshot !== null);
    if ('refused' in change) this.refusal = change.refused;
    else if (inSnapshot) {
      this.refusal = new ApiError('forbidden', "the token's key prefixes changed during the snapshot: open the stream again", { prefixes: change.prefixes });
    } else this.filter = change.narrowed;
    this.scopeVersion += 1;
    this.waiter.wake();
  }

  async next(): Promise<ChangeStreamEvent<Page> | null> {
    if (this.options.signal.aborted) this.phase = 'done';
    // The opening goes first, so that a reader refused at once still reads the reset.
    if (this.refusal && this.phase !== 'done' && this.phase !== 'open') return this.refused(this.refusal);
    switch (this.phase) {
      case 'open':
        this.phase = this.options.snapshot ? 'snapshot' : 'live';
        // Sent at once so that the headers go out before the first record exists.
        return { type: 'open' };
      case 'snapshot':
        return this.snapshotChunk(this.options.snapshot!);
      case 'live':
        return this.liveChunk();
      case 'done':
        return null;
    }
  }

  /** Gives back all it holds, however the stream ends; safe to call again. */
  close(): void {
    this.waiter.close();
    this.releaseSnapshot();
  }

  private releaseSnapshot(): void {
    const snapshot = this.options.snapshot;
    if (!snapshot) return;
    snapshot.close();
  }

  private refused(refusal: ApiError): ChangeStreamEvent<Page> {
    this.phase = 'done';
    this.releaseSnapshot();
    return { type: 'reset', body: resetBody(refusal, this.options.tail.horizon, this.options.epoch) };
  }

  private snapshotDigest: SnapshotDigest | undefined;

  private async snapshotChunk(reader: SnapshotReader): Promise<ChangeStreamEvent<Page>> {
    const lines = await reader.nextJson('record', PAGE_ROWS, PAGE_CHARS);
    if (this.refusal) return this.refused(this.refusal);
    this.snapshotDigest ??= new SnapshotDigest(reader, showsEverything(this.options));
    if (lines.length > 0) {
      this.snapshotDigest.add(lines);
      return { type: 'snapshot-records', lines };
    }
    this.releaseSnapshot();
    this.position = reader.offset;
    this.phase = 'live';
    this.lastProgressAt = Date.now();
    return { type: 'snapshot-end', offset: reader.offset, epoch: reader.epoch, ...(this.gen === undefined ? {} : { gen: this.gen }), digest: this.snapshotDigest.hex() };
  }

  private async liveChunk(): Promise<ChangeStreamEvent<Page> | null> {
    for (;;) {
      if (this.refusal) return this.refused(this.refusal);
      const progressDue = Date.now() - this.lastProgressAt >= PROGRESS_INTERVAL_MS;
      let foundNothing = false;
      // At the head there is nothing to read: go straight to waiting.
      if (this.position < this.options.tail.head || progressDue) {
        const event = await this.read(progressDue);
        if (event === undefined) continue;
        if (event) return event;
        foundNothing = true;
      }
      if (!(await this.waitForCommit(foundNothing))) {
        this.phase = 'done';
        return null;
      }
    }
  }

  /** The next event, null if there is none yet, undefined if the scope changed during the read (read again). */
  private async read(progressDue: boolean): Promise<ChangeStreamEvent<Page> | null | undefined> {
    const { tail } = this.options;
    const version = this.scopeVersion;
    let page: FeedPage;
    let text: Page;
    try {
      const gen = this.gen === undefined ? undefined : parseGenerationToken(this.gen) ?? undefined;
      ({ page, text } = await tail.read({ after: this.position, ...this.filter, limit: PAGE_ROWS, maxChars: PAGE_CHARS, gen }));
      if (version !== this.scopeVersion) return undefined;
    } catch (err) {
      if (version !== this.scopeVersion) return undefined;
      if (!(err instanceof ApiError) || err.statusCode !== 410) throw err;
      this.phase = 'done';
      return { type: 'reset', body: resetBody(err, tail.horizon, this.options.epoch) };
    }
    const sent = page.records.length > 0;
    const lastSent = sent ? page.records[page.records.length - 1]!.offset : this.position;
    this.position = page.next;
    // A reader told of a new generation resumes under it (its reconnect's `gen`).
    const newGeneration = page.gen !== undefined && page.gen !== this.gen;
    this.gen = page.gen ?? this.gen;
    // Records skipped by the prefix (or removed by compaction) still move the reader.
    if (page.next > lastSent || progressDue || newGeneration) {
      this.lastProgressAt = Date.now();
      const gen = this.gen === undefined ? {} : { gen: this.gen };
      return sent ? { type: 'records', page: text, progress: page.next, ...gen } : { type: 'progress', offset: page.next, ...gen };
    }
    return sent ? { type: 'records', page: text } : null;
  }

  /**
   * Waits for a commit after the reader's position, or until progress is due (or, after a read
   * that found nothing, the retry is); false once the stream must end.
   */
  private async waitForCommit(foundNothing: boolean): Promise<boolean> {
    const { notifier, signal } = this.options;
    const progressAt = this.lastProgressAt + PROGRESS_INTERVAL_MS;
    // A commit published since the last read: read again rather than wait.
    if (!signal.aborted && (foundNothing || notifier.head <= this.position)) {
      await (foundNothing ? this.waiter.waitAfterEmptyRead(progressAt) : this.waiter.wait(progressAt));
    }
    return !signal.aborted;
  }
}
