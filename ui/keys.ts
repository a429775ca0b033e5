// The key browser: a page of live keys (GET /v1/keys with prefix, limit and cursor)
// kept current by following the changes from the listing's own offset, so no change
// between the listing and the changes is missed.
//
// A page covers a range of keys: after the last key of the page before it, and up to
// its own last key (or everything after, on the last page). A key set live inside that
// range appears in place; a deleted key leaves; a changed value is updated and
// highlighted. Keys outside the range belong to other pages and are left to them. A
// page never shows more rows than the page size: a key arriving in range pushes the
// last one out to the next page, and the page's range ends at its new last key.
import { ApiFailure, type Api, type KeyEntry, type LogRecord } from './api.js';
import { compareKeys, formatCount, formatTime, formatValue } from './format.js';
import { ChangeFollower, type FollowState } from './follow.js';

interface PagePosition {
  /** The listing's cursor for this page; null for the first. */
  cursor: string | null;
  /** The last key of the page before (exclusive lower bound); null for the first. */
  after: string | null;
}

export interface KeyBrowserElements {
  form: HTMLFormElement;
  prefix: HTMLInputElement;
  pageSize: HTMLSelectElement;
  rows: HTMLTableSectionElement;
  caption: HTMLElement;
  empty: HTMLElement;
  prev: HTMLButtonElement;
  next: HTMLButtonElement;
  pageLabel: HTMLElement;
  streamState: HTMLElement;
}

export interface KeyBrowserEvents {
  unauthorized(): void;
}

export class KeyBrowser {
  private prefix = '';
  private pageSize = 25;
  private pages: PagePosition[] = [{ cursor: null, after: null }];
  private index = 0;
  private entries: KeyEntry[] = [];
  private readonly rowOf = new Map<string, HTMLTableRowElement>();
  /** The cursor of the page after this one; null on the last page. */
  private nextCursor: string | null = null;
  /** The page's last key when it was listed: the upper bound of its range, null on the last page. */
  private upper: string | null = null;
  /**
   * The page pushed keys out to the next one: `nextCursor` no longer starts the next
   * page where this one now ends, so the next page's cursor is asked for on the way.
   */
  private trimmed = false;
  private changes: ChangeFollower | null = null;
  /** Bumped by each load, so that an answer to an older one is dropped. */
  private generation = 0;
  private running = false;

  constructor(
    private readonly api: Api,
    private readonly el: KeyBrowserElements,
    private readonly events: KeyBrowserEvents,
  ) {
    this.pageSize = Number(el.pageSize.value) || 25;
    el.form.addEventListener('submit', (event) => {
      event.preventDefault();
      this.filter(el.prefix.value, Number(el.pageSize.value));
    });
    el.pageSize.addEventListener('change', () => this.filter(el.prefix.value, Number(el.pageSize.value)));
    el.prev.addEventListener('click', () => this.turn(-1));
    el.next.addEventListener('click', () => this.turn(1));
  }

  start(): void {
    this.running = true;
    void this.load();
  }

  stop(): void {
    this.running = false;
    this.generation += 1;
    this.changes?.stop();
    this.changes = null;
  }

  private filter(prefix: string, pageSize: number): void {
    this.prefix = prefix;
    this.pageSize = pageSize;
    this.pages = [{ cursor: null, after: null }];
    this.index = 0;
    void this.load();
  }

  private turn(step: 1 | -1): void {
    if (step === 1) {
      if (this.nextCursor === null) return;
      if (this.trimmed) return void this.turnAfterTrim();
      this.pages[this.index + 1] = { cursor: this.nextCursor, after: this.upper };
    } else if (this.index === 0) {
      return;
    }
    this.index += step;
    void this.load();
  }

  /** The next page of a page that pushed keys out: lists this one again for its cursor. */
  private async turnAfterTrim(): Promise<void> {
    const generation = this.generation;
    try {
      const listing = await this.api.keys(this.prefix, this.pageSize, this.pages[this.index]!.cursor);
      if (generation !== this.generation) return;
      if (listing.cursor !== null) {
        this.pages[this.index + 1] = { cursor: listing.cursor, after: listing.items.at(-1)?.key ?? null };
        this.index += 1;
      }
    } catch {
      // Shown by the load below, which lists again.
    }
    if (generation === this.generation) void this.load();
  }

  /** Lists the current page, then follows the changes after the listing's offset. */
  private async load(): Promise<void> {
    if (!this.running) return;
    const generation = ++this.generation;
    this.changes?.stop();
    this.changes = null;
    const page = this.pages[this.index]!;
    this.setBusy(true);
    try {
      const listing = await this.api.keys(this.prefix, this.pageSize, page.cursor);
      if (generation !== this.generation) return;
      this.entries = listing.items;
      this.nextCursor = listing.cursor;
      this.upper = listing.cursor === null ? null : (listing.items.at(-1)?.key ?? null);
      this.trimmed = false;
      this.renderAll();
      this.follow(listing.offset, generation);
    } catch (err) {
      if (generation !== this.generation) return;
      if (err instanceof ApiFailure && err.status === 401) return this.events.unauthorized();
      this.entries = [];
      this.renderAll();
      const message = err instanceof Error ? err.message : String(err);
      this.el.empty.textContent = `The keys could not be listed: ${message}.`;
      this.el.empty.hidden = false;
      // A bad prefix stays bad; anything else is tried again shortly.
      if (!(err instanceof ApiFailure && err.status === 400)) {
        setTimeout(() => generation === this.generation && void this.load(), 3000);
      }
    } finally {
      if (generation === this.generation) this.setBusy(false);
    }
  }

  private follow(after: number, generation: number): void {
    const stream = new ChangeFollower(
      this.api,
      { prefix: this.prefix, after },
      {
        record: (record) => {
          if (generation === this.generation) this.apply(record);
        },
        reset: () => {
          // Compaction removed deletes this page has not seen: list it again.
          if (generation === this.generation) void this.load();
        },
        unauthorized: () => this.events.unauthorized(),
        state: (state, detail) => {
          if (generation === this.generation || state === 'stopped') this.showFollowState(state, detail);
        },
      },
    );
    this.changes = stream;
    stream.start();
  }

  private inRange(key: string): boolean {
    const page = this.pages[this.index]!;
    if (page.after !== null && compareKeys(key, page.after) <= 0) return false;
    if (this.nextCursor !== null && (this.upper === null || compareKeys(key, this.upper) > 0)) return false;
    return true;
  }

  /** One record of the changes. */
  apply(record: LogRecord): void {
    const at = this.entries.findIndex((entry) => entry.key === record.key);
    if (record.op === 'delete') {
      if (at < 0) return;
      this.entries.splice(at, 1);
      this.rowOf.get(record.key)?.remove();
      this.rowOf.delete(record.key);
      this.renderMeta();
      return;
    }
    const entry: KeyEntry = { key: record.key, value: record.value, offset: record.offset, ts: record.ts };
    if (at >= 0) {
      // Records arrive in offset order; this guards against a replay all the same.
      if (this.entries[at]!.offset >= record.offset) return;
      this.entries[at] = entry;
      const row = this.rowOf.get(record.key)!;
      this.fillRow(row, entry);
      flash(row);
      return;
    }
    if (!this.inRange(record.key)) return;
    let position = this.entries.findIndex((other) => compareKeys(record.key, other.key) < 0);
    if (position < 0) position = this.entries.length;
    this.entries.splice(position, 0, entry);
    const row = this.makeRow(entry);
    this.el.rows.insertBefore(row, this.el.rows.children[position] ?? null);
    flash(row);
    if (this.entries.length > this.pageSize) this.pushOutLast();
    this.renderMeta();
  }

  /** Moves the page's last key to the next page, where the page size says it belongs. */
  private pushOutLast(): void {
    const last = this.entries.pop()!;
    this.rowOf.get(last.key)?.remove();
    this.rowOf.delete(last.key);
    this.upper = this.entries.at(-1)?.key ?? null;
    this.trimmed = true;
    // Not null: there is a next page now, even if this was the last one.
    this.nextCursor ??= '';
  }

  private renderAll(): void {
    this.rowOf.clear();
    this.el.rows.replaceChildren(...this.entries.map((entry) => this.makeRow(entry)));
    this.el.empty.textContent = 'No live keys match.';
    this.renderMeta();
  }

  private renderMeta(): void {
    const filter = this.prefix === '' ? '' : ` starting with “${this.prefix}”`;
    this.el.caption.textContent = `Live keys${filter}, page ${this.index + 1}: ${formatCount(this.entries.length)} shown, values update live`;
    this.el.empty.hidden = this.entries.length > 0;
    this.el.pageLabel.textContent = `Page ${this.index + 1}`;
    this.el.prev.disabled = this.index === 0;
    this.el.next.disabled = this.nextCursor === null;
  }

  private makeRow(entry: KeyEntry): HTMLTableRowElement {
    const row = document.createElement('tr');
    const key = document.createElement('th');
    key.scope = 'row';
    key.className = 'key';
    const value = document.createElement('td');
    value.className = 'value';
    const offset = document.createElement('td');
    offset.className = 'num';
    const when = document.createElement('td');
    when.className = 'when';
    row.append(key, value, offset, when);
    this.fillRow(row, entry);
    this.rowOf.set(entry.key, row);
    return row;
  }

  private fillRow(row: HTMLTableRowElement, entry: KeyEntry): void {
    const [key, value, offset, when] = row.children as unknown as HTMLElement[];
    row.dataset.key = entry.key;
    key!.replaceChildren(...keyName(entry.key));
    key!.title = entry.key;
    const shown = formatValue(entry.value);
    const code = document.createElement('code');
    code.textContent = shown.text;
    if (shown.cut) code.title = shown.full.slice(0, 4000);
    value!.replaceChildren(code);
    value!.dataset.json = shown.full;
    offset!.textContent = String(entry.offset);
    const time = document.createElement('time');
    time.dateTime = new Date(entry.ts).toISOString();
    time.textContent = formatTime(entry.ts);
    when!.replaceChildren(time);
  }

  private setBusy(busy: boolean): void {
    this.el.rows.closest('table')?.setAttribute('aria-busy', String(busy));
  }

  private showFollowState(state: FollowState, detail: string): void {
    const text: Record<FollowState, string> = {
      connecting: 'Live updates: connecting…',
      live: 'Live updates: on',
      retrying: `Live updates: ${detail}`,
      stopped: '',
    };
    // Following stopped to make way for the next page says nothing.
    if (state === 'stopped' && this.running) return;
    this.el.streamState.textContent = text[state];
    this.el.streamState.dataset.state = state;
  }
}

/**
 * A key's text with line-break opportunities only after its separators, so a long key
 * wraps between the parts of its name, never inside one (the cell cuts a part too long
 * for it with an ellipsis; the title has the whole key).
 */
function keyName(key: string): Node[] {
  const nodes: Node[] = [];
  for (const part of key.split(/(?<=[-/:._])/)) {
    if (nodes.length > 0) nodes.push(document.createElement('wbr'));
    nodes.push(document.createTextNode(part));
  }
  return nodes;
}

/** Highlights a row that just changed (restarting the highlight if it is still on). */
function flash(row: HTMLTableRowElement): void {
  row.classList.remove('changed');
  void row.offsetWidth;
  row.classList.add('changed');
}
