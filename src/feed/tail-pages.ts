// The pages last read at the head of the log, shared by the readers that one commit
// wakes: a hundred readers at the same offset and filter cost one page from the tail
// window and one rendering instead of a hundred, for as long as the head is unchanged.
import { checkReader, type FeedPage, type FeedQuery } from './change-feed.js';
import { knowsGeneration } from '../contract/lineage.js';
import type { LogStore, StoredRecord } from '../store/log-store.js';
import type { TailWindow } from './tail-window.js';

/** Readers far behind are at offsets of their own: the pages kept per head are few. */
const MAX_PAGES = 64;

export interface RenderedPage<Rendered> {
  page: FeedPage;
  text: Rendered;
}

interface SharedPage<Rendered> {
  reading: Promise<RenderedPage<Rendered>>;
  /**
   * Each sharing reader's `gone` while the read is under way (the store is skipped only when
   * all of them left); null once read, so that a page shared for long holds no request.
   */
  readers: ((() => boolean) | undefined)[] | null;
}

export class TailPages<Rendered> {
  private pagesHead = -1;
  private pagesVersion = -1;
  /** Promises, so that readers woken together share the read already under way. */
  private readonly pages = new Map<string, SharedPage<Rendered>>();

  constructor(
    private readonly store: LogStore,
    private readonly window: TailWindow,
    private readonly render: (records: StoredRecord[]) => Rendered,
  ) {}

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
      this.pages.clear();
      this.pagesHead = position.head;
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
      shared.readers?.push(gone);
      return shared.reading;
    }
    const readers = [gone];
    const allGone = (): boolean => readers.every((isGone) => isGone?.() === true);
    const reading = this.window.read(query, allGone).then((page) => ({ page, text: this.render(page.records) }));
    if (known && this.pages.size < MAX_PAGES) {
      const entry: SharedPage<Rendered> = { reading, readers };
      this.pages.set(key, entry);
      reading.then(
        () => (entry.readers = null),
        // A failed read (the database unreachable for a moment) is not kept for the next reader.
        () => this.pages.get(key) === entry && this.pages.delete(key),
      );
    }
    return reading;
  }
}
