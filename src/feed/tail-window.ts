// The newest records of the log, kept in memory for the readers at or near the head (the
// Kubernetes watch cache's idea): one unfiltered read of the store per movement of the
// head serves every follower, whatever its filter, instead of a read per position and
// filter. Readers behind the window read the store as before.
import { inScope } from '../contract/key-scope.js';
import { servedGeneration, knowsGeneration } from '../contract/lineage.js';
import { changesUntil, type LogPosition, type LogStore, type StoredRecord } from '../store/log-store.js';
import { checkReader, FEED_SCAN_RECORDS, readFeed, type FeedPage, type FeedQuery } from './change-feed.js';
import type { ReadTurns } from './read-turns.js';

export interface TailWindowLimits {
  /** Records kept; the oldest leave first. */
  records: number;
  /** Characters of keys and values kept. */
  chars: number;
}

export const TAIL_WINDOW_LIMITS: TailWindowLimits = { records: 20_000, chars: 32 * 1024 * 1024 };

export interface TailWindowOptions {
  limits?: TailWindowLimits;
  /** Told of each read: answered from the window, or left to the store. */
  onRead?: (from: 'window' | 'store') => void;
}

/** Records one refresh reads: a head far ahead is caught up with over several. */
const REFRESH_RECORDS = 5000;

const charsOf = (record: StoredRecord): number => record.key.length + (record.value?.length ?? 0);

export class TailWindow {
  /** Every surviving record in (start, end], ascending; empty until the first read. */
  private records: StoredRecord[] = [];
  private chars = 0;
  private start = -1;
  private end = -1;
  private epoch = '';
  private lineage: string | undefined;
  /** Bumped at each reset: pages rendered from the window before it are stale (tail-pages.ts). */
  private resets = 0;
  /** Whether the store was read since the window was (re)started. */
  private hasRead = false;
  /** The refresh under way, shared by the readers that need it. */
  private refreshing: Promise<void> | null = null;
  private readonly limits: TailWindowLimits;

  constructor(
    private readonly store: LogStore,
    private readonly turns: ReadTurns,
    private readonly options: TailWindowOptions = {},
  ) {
    this.limits = options.limits ?? TAIL_WINDOW_LIMITS;
  }

  /** A page as readFeed gives it: from memory when `after` is within the window. */
  async read(query: FeedQuery, gone?: () => boolean): Promise<FeedPage> {
    const position = this.store.position();
    if (this.epoch !== position.epoch || this.lineage !== position.lineage || this.start < 0) this.reset(position);
    // A new window reads the store once, even at the head: a database that cannot be read
    // answers its error, not an empty page from memory.
    if (query.after >= this.start && (this.end < position.head || !this.hasRead)) await this.refresh();
    // Behind the window, or ahead of what this node has read (another node's commit):
    // the store answers, and checks the position against the database.
    // A reader served under a generation this node has not learnt yet: the store knows it.
    const newerGeneration = query.gen !== undefined && this.lineage !== undefined && !knowsGeneration(this.lineage, query.gen);
    if (query.after < this.start || query.after > this.end || newerGeneration) return this.fromStore(query, gone);
    // In its turn, as a read of the store: answered at once, hundreds of followers polling in a loop
    // would take the event loop from every other request (docs/reads.md, Turns).
    return this.turns.run(async () => {
      // The window moved on while the read waited for its turn.
      if (query.after < this.start || query.after > this.end) return this.fromStore(query, gone);
      const now = this.store.position();
      checkReader(query.after, { ...now, lineage: this.lineage }, query.gen);
      this.options.onRead?.('window');
      return this.page(query, Math.max(now.head, this.end));
    }, gone);
  }

  private fromStore(query: FeedQuery, gone?: () => boolean): Promise<FeedPage> {
    this.options.onRead?.('store');
    return readFeed(this.turns, this.store, query, gone);
  }

  /**
   * The page the store would give (readFeed): the same scan bound, `limit` and `maxChars`
   * over the records of the prefix or key, then the scope's filter, so that a page's
   * `next`, and the Link built from it, do not depend on where it was read.
   */
  private page(query: FeedQuery, head: number): FeedPage {
    const { after, prefix, key, within, limit, maxChars } = query;
    const until = Math.min(this.end, changesUntil({ after, prefix, key, limit, scan: FEED_SCAN_RECORDS }));
    const records: StoredRecord[] = [];
    let taken = 0;
    let chars = 0;
    for (let i = this.firstAfter(after); i < this.records.length; i++) {
      const record = this.records[i]!;
      if (record.offset > until) break;
      if (key !== undefined ? record.key !== key : !record.key.startsWith(prefix)) continue;
      if (!within || inScope(record.key, within)) records.push(record);
      taken += 1;
      chars += charsOf(record);
      if (taken >= limit || chars >= maxChars) return this.withGeneration({ records, next: record.offset, head });
    }
    return this.withGeneration({ records, next: until, head });
  }

  private withGeneration(page: FeedPage): FeedPage {
    const gen = this.lineage === undefined ? undefined : servedGeneration(this.lineage, page.next);
    return gen === undefined ? page : { ...page, gen };
  }

  /** How many times the window was emptied: a page rendered from it before then may be stale. */
  get version(): number {
    return this.resets;
  }

  /** Forgets every record: what the node knew of the log may be wrong (LogStore.watchRewind). */
  rewind(position: LogPosition): void {
    this.reset(position);
  }

  /** The index of the first record with an offset above `after`. */
  private firstAfter(after: number): number {
    let low = 0;
    let high = this.records.length;
    while (low < high) {
      const mid = (low + high) >>> 1;
      if (this.records[mid]!.offset <= after) low = mid + 1;
      else high = mid;
    }
    return low;
  }

  private reset(position: LogPosition): void {
    // The first start makes nothing stale.
    if (this.start >= 0) this.resets += 1;
    this.records = [];
    this.chars = 0;
    this.start = position.head;
    this.end = position.head;
    this.epoch = position.epoch;
    this.lineage = position.lineage;
    this.hasRead = false;
  }

  private refresh(): Promise<void> {
    this.refreshing ??= this.readNewer().finally(() => {
      this.refreshing = null;
    });
    return this.refreshing;
  }

  /** Appends what was committed after the window's end, in one read of the store. */
  private async readNewer(): Promise<void> {
    const from = this.end;
    const resets = this.resets;
    const page = await this.turns.run(() => this.store.readChanges({ after: from, prefix: '', limit: REFRESH_RECORDS, maxChars: this.limits.chars }));
    // Reset meanwhile (another epoch or lineage): what was read belongs to the old window.
    if (this.end !== from || this.resets !== resets) return;
    // Read under a lineage the window has not learnt: the next read starts a new window.
    if (page.lineage !== this.lineage) return;
    for (const record of page.records) {
      this.records.push(record);
      this.chars += charsOf(record);
    }
    const last = page.records[page.records.length - 1];
    this.end = page.full && last ? last.offset : page.examined;
    this.hasRead = true;
    this.evict();
  }

  private evict(): void {
    let drop = 0;
    while (drop < this.records.length && (this.records.length - drop > this.limits.records || this.chars > this.limits.chars)) {
      this.chars -= charsOf(this.records[drop]!);
      drop += 1;
    }
    if (drop === 0) return;
    // The window now starts where the last record dropped was: readers there read on from memory.
    this.start = this.records[drop - 1]!.offset;
    this.records = this.records.slice(drop);
  }
}
