// The pages last read at the head of the log, shared by the readers that one commit
// wakes: a hundred readers at the same offset and filter cost one page from the tail
// window and one rendering instead of a hundred, for as long as the head is unchanged.
import { checkReader, type FeedPage, type FeedQuery } from './change-feed.js';
import { knowsGeneration } from '../contract/lineage.js';
import type { LogStore, StoredRecord } from '../store/log-store.js';
import type { TailWindow } from './tail-window.js';

/** Readers far behind are at offsets of their own: the pages kept per head are few. */
const MAX_PAGES = 64;
/** What a kept page and each of its records cost beside keys, values and rendering (objects, fields). */
const PAGE_OVERHEAD_BYTES = 256;
const RECORD_OVERHEAD_BYTES = 96;

export const SHARED_PAGES_MAX_BYTES = 64 * 1024 * 1024;

/**
 * The memory that the pages kept at the head may hold, shared by every TailPages of the process
 * (STATELOG_SHARED_PAGES_MAX_BYTES); a page read under way counts once kept, as its readers hold it anyway.
 */
export class SharedPagesBudget {
  private used = 0;

  constructor(
    readonly maxBytes: number = SHARED_PAGES_MAX_BYTES,
    private readonly hooks: { onBytes?: (bytes: number) => void; onEvict?: () => void } = {},
  ) {}

  get bytes(): number {
    return this.used;
  }

  fits(bytes: number): boolean {
    return this.used + bytes <= this.maxBytes;
  }

  take(bytes: number): void {
    this.used += bytes;
    this.hooks.onBytes?.(this.used);
  }

  give(bytes: number): void {
    this.used -= bytes;
    this.hooks.onBytes?.(this.used);
  }

  /** A kept page dropped for another, or a page read and not kept for want of room. */
  evicted(): void {
    this.hooks.onEvict?.();
  }
}

export interface RenderedPage<Rendered> {
  page: FeedPage;
  text: Rendered;
  /**
   * Nothing past `after` though the node knew a later head as the read began: the database is
   * behind what the node saw (a failover lost those commits). Never kept for other readers; a
   * reader waits a little before asking again (RepeatedWaiter.waitAfterEmptyRead).
   */
  behind: boolean;
}

interface SharedPage<Rendered> {
  reading: Promise<RenderedPage<Rendered>>;
  /**
   * Each sharing reader's `gone` while the read is under way (the store is skipped only when
   * all of them left); null once read, so that a page shared for long holds no request.
   */
  readers: ((() => boolean) | undefined)[] | null;
  /** Readers that asked for it: a page read by one only may give its room to another. */
  asked: number;
  /** Its share of the budget once kept; 0 while read. */
  bytes: number;
}

export interface TailPagesOptions<Rendered> {
  budget?: SharedPagesBudget;
  /** Bytes of a rendering. */
  sizeOf?: (text: Rendered) => number;
}

function recordBytes(records: readonly StoredRecord[]): number {
  let bytes = 0;
  for (const record of records) bytes += RECORD_OVERHEAD_BYTES + record.key.length + (record.value?.length ?? 0);
  return bytes;
}

export class TailPages<Rendered> {
  private pagesHead = -1;
  private pagesVersion = -1;
  /** Promises, so that readers woken together share the read already under way; in the order read. */
  private readonly pages = new Map<string, SharedPage<Rendered>>();
  private readonly budget: SharedPagesBudget;
  private readonly sizeOf: (text: Rendered) => number;

  constructor(
    private readonly store: LogStore,
    private readonly window: TailWindow,
    private readonly render: (records: StoredRecord[]) => Rendered,
    options: TailPagesOptions<Rendered> = {},
  ) {
    this.budget = options.budget ?? new SharedPagesBudget();
    this.sizeOf = options.sizeOf ?? ((text) => (typeof text === 'string' ? text.length : ((text as { length?: number }).length ?? 0)));
  }

  get head(): number {
    return this.store.position().head;
  }

  get horizon(): number {
    return this.store.position().horizon;
  }

  /**
   * The page after `after` with `prefix`, or a 410 from checkReader, as readFeed gives it;
   * not read from the store if the reader is `gone` by its turn.
   */
  async read(query: FeedQuery, gone?: () => boolean): Promise<RenderedPage<Rendered>> {
    const position = this.store.position();
    if (position.head !== this.pagesHead || this.window.version !== this.pagesVersion) {
      this.clear(position.head);
      this.pagesVersion = this.window.version;
    }
    const filter = query.key === undefined ? `p${query.prefix}${query.within ? `\u0000${query.within.join('\u0000')}` : ''}` : `k${query.key}`;
    const key = `${query.after}\u0000${query.limit}\u0000${query.maxChars}\u0000${filter}`;
    // A reader under a generation this node has not learnt yet reads for itself (tail-window.ts).
    const known = query.gen === undefined || position.lineage === undefined || knowsGeneration(position.lineage, query.gen);
    const shared = known ? this.pages.get(key) : undefined;
    if (shared) {
      // The horizon moves without the head (compaction): check it afresh. A record
      // compacted away since the read is harmless: a later one for its key follows.
      checkReader(query.after, position, query.gen);
      shared.asked += 1;
      shared.readers?.push(gone);
      return shared.reading;
    }
    const readers = [gone];
    const allGone = (): boolean => readers.every((isGone) => isGone?.() === true);
    const reading = this.window.read(query, allGone).then((page) => ({
      page,
      text: this.render(page.records),
      behind: page.records.length === 0 && page.next <= query.after && page.next < position.head,
    }));
    if (known && this.pages.size >= MAX_PAGES) this.evictOne();
    if (known && this.pages.size < MAX_PAGES) {
      const entry: SharedPage<Rendered> = { reading, readers, asked: 1, bytes: 0 };
      this.pages.set(key, entry);
      reading.then(
        (read) => {
          entry.readers = null;
          if (read.behind) this.pages.delete(key);
          else this.keep(key, entry, read);
        },
        // A failed read (the database unreachable for a moment) is not kept for the next reader.
        () => this.pages.get(key) === entry && this.pages.delete(key),
      );
    }
    return reading;
  }

  /** Drops the oldest kept page that a single reader asked for (never `spared`); false if there is none. */
  private evictOne(spared?: SharedPage<Rendered>): boolean {
    for (const [key, entry] of this.pages) {
      if (entry === spared || entry.bytes === 0 || entry.asked > 1) continue;
      this.pages.delete(key);
      this.budget.give(entry.bytes);
      this.budget.evicted();
      return true;
    }
    return false;
  }

  /** Every kept page's room back: the head moved, no reader will ask for them again. */
  private clear(head: number): void {
    for (const entry of this.pages.values()) if (entry.bytes > 0) this.budget.give(entry.bytes);
    this.pages.clear();
    this.pagesHead = head;
  }

  /**
   * Keeps a page read within the budget: room is made only from pages that a single reader asked
   * for, oldest first, so that one reader walking through pages of its own never evicts the pages
   * others share; a page that does not fit even so is not kept.
   */
  private keep(key: string, entry: SharedPage<Rendered>, read: RenderedPage<Rendered>): void {
    if (this.pages.get(key) !== entry) return;
    const bytes = PAGE_OVERHEAD_BYTES + recordBytes(read.page.records) + this.sizeOf(read.text);
    while (!this.budget.fits(bytes) && this.evictOne(entry));
    if (!this.budget.fits(bytes)) {
      this.pages.delete(key);
      this.budget.evicted();
      return;
    }
    entry.bytes = bytes;
    this.budget.take(bytes);
  }
}
