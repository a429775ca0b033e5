// Reads of a filter with several prefixes (a token's scope): a listing reads each prefix in turn, a
// snapshot (one offset) reads their common start and keeps the lines within them.
import { compareBytes, inScope, type ReadFilter } from '../contract/key-scope.js';
import type { ListPage, ListQuery, LogStore, SnapshotReader, SnapshotShape } from '../store/log-store.js';
import { FilteredSnapshot } from './filtered-snapshot.js';

/** A page of live keys of `filter` in byte order; several prefixes are listed in turn (apart and in order). */
export async function listFiltered(store: LogStore, filter: ReadFilter, query: Omit<ListQuery, 'prefix'>): Promise<ListPage> {
  if (filter.within === undefined) return store.list({ ...query, prefix: filter.prefix });
  const { afterKey, maxChars = Number.POSITIVE_INFINITY } = query;
  const page: ListPage = { items: [], head: 0 };
  let chars = 0;
  for (const prefix of filter.within) {
    // A prefix whose keys all sort before the cursor has nothing left to list.
    if (afterKey !== null && !afterKey.startsWith(prefix) && compareBytes(afterKey, prefix) > 0) continue;
    const part = await store.list({ prefix, afterKey, limit: query.limit - page.items.length, maxChars: maxChars - chars });
    page.head = part.head;
    for (const item of part.items) chars += item.key.length + item.value.length;
    page.items.push(...part.items);
    if (part.truncated || part.scannedTo !== undefined || page.items.length >= query.limit || chars >= maxChars) {
      page.truncated = part.truncated === true || chars >= maxChars;
      if (part.scannedTo !== undefined) page.scannedTo = part.scannedTo;
      return page;
    }
  }
  if (page.head === 0) page.head = store.position().head;
  return page;
}

/** The key of a snapshot line: the first member named "key" (an offset, a number, may come before it). */
export function lineKey(line: string): string {
  const start = line.indexOf('"key":"') + 6;
  let end = start + 1;
  while (line.charCodeAt(end) !== 0x22) end += line.charCodeAt(end) === 0x5c ? 2 : 1;
  return JSON.parse(line.slice(start, end + 1)) as string;
}

/** A snapshot of `within`'s keys, read from a snapshot of their common prefix. */
export class ScopedSnapshot extends FilteredSnapshot {
  constructor(
    inner: SnapshotReader,
    private readonly within: readonly string[],
  ) {
    super(inner);
  }

  async nextJson(shape: SnapshotShape, max: number, maxChars?: number): Promise<string[]> {
    for (;;) {
      const lines = await this.inner.nextJson(shape, max, maxChars);
      if (lines.length === 0) return lines;
      const kept = lines.filter((line) => inScope(lineKey(line), this.within));
      if (kept.length > 0) return kept;
    }
  }
}
