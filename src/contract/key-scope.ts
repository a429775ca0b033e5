// What a token with key prefixes may see and touch: its keys, as if no other existed; every route asks
// here (through http/scope.ts), so the rule lives once.
import { ApiError } from './errors.js';
import { checkWatchFilter } from './key-rules.js';

/** Byte order of UTF-8 (the order the store lists keys in), not UTF-16's. */
export function compareBytes(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));
}

/** Prefixes in byte order, without repeats or one that another covers: their key ranges are apart and in order. */
export function normalizePrefixes(prefixes: readonly string[]): string[] {
  const sorted = [...new Set(prefixes)].sort(compareBytes);
  const kept: string[] = [];
  for (const prefix of sorted) {
    // Sorted, a covering prefix comes right before what it covers.
    if (kept.length === 0 || !prefix.startsWith(kept[kept.length - 1]!)) kept.push(prefix);
  }
  return kept;
}

export function inScope(key: string, prefixes: readonly string[]): boolean {
  for (const prefix of prefixes) if (key.startsWith(prefix)) return true;
  return false;
}

/** What a read shows: keys with `prefix`, or exactly `key`; with `within`, only those with one of its prefixes. */
export interface ReadFilter {
  prefix: string;
  key?: string;
  within?: readonly string[];
}

export function outsideScope(what: string, prefixes: readonly string[], details: Record<string, unknown> = {}): ApiError {
  return new ApiError('forbidden', `${what} is outside this token's key prefixes`, { ...details, prefixes });
}

/** The longest common start of the texts, never ending inside a surrogate pair. */
function commonStart(texts: readonly string[]): string {
  let end = 0;
  const first = texts[0]!;
  while (end < first.length && texts.every((text) => text.charCodeAt(end) === first.charCodeAt(end))) end++;
  const last = first.charCodeAt(end - 1);
  return first.slice(0, last >= 0xd800 && last <= 0xdbff ? end - 1 : end);
}

/** A read's filter for a token limited to `scope` (null: all): narrower than the scope as asked, wider cut to it, apart 403. */
export function readFilter(scope: readonly string[] | null, prefix: string, key?: string): ReadFilter {
  const asked = checkWatchFilter(prefix, key);
  if (scope === null) return asked;
  if (asked.key !== undefined) {
    if (!inScope(asked.key, scope)) throw outsideScope('key', scope);
    return asked;
  }
  const within = scope.filter((own) => own.startsWith(asked.prefix));
  if (within.length === 0) {
    if (inScope(asked.prefix, scope)) return asked;
    throw outsideScope('prefix', scope);
  }
  return within.length === 1 ? { prefix: within[0]! } : { prefix: commonStart(within), within };
}

/** Whether a read with this filter shows every live key (its digest is then the stored one). */
export function showsEverything(filter: ReadFilter): boolean {
  return filter.prefix === '' && filter.key === undefined && filter.within === undefined;
}

/** What a reload of the credentials does to a held request (a stream, a long poll): its filter narrowed, or its refusal. */
export type ScopeChange = { narrowed: ReadFilter; prefixes: readonly string[] } | { refused: ApiError };

/** The prefixes a prefix filter shows keys of (each starting with its `prefix`). */
const prefixesOf = (filter: ReadFilter): readonly string[] => filter.within ?? [filter.prefix];

/** Whether every key `inner` shows, `outer` shows too. */
export function coversFilter(outer: ReadFilter, inner: ReadFilter): boolean {
  if (inner.key !== undefined) return outer.key !== undefined ? outer.key === inner.key : inScope(inner.key, prefixesOf(outer));
  if (outer.key !== undefined) return false;
  const outerPrefixes = prefixesOf(outer);
  return prefixesOf(inner).every((prefix) => inScope(prefix, outerPrefixes));
}
