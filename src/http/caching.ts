// What an answer tells the HTTP caches in front: `public`, or with any credential in force (STATELOG_TOKENS,
// STATELOG_TOKENS_FILE, client certificates) `private`, so that no shared cache hands a tenant's answer on.
import type { Config } from '../config.js';

export type CacheScope = 'public' | 'private';

export function cacheScope(config: Pick<Config, 'tokens' | 'tokensFile'>): CacheScope {
  return config.tokens || config.tokensFile ? 'private' : 'public';
}

/** An answer that stays true for ever: a page of history. */
export function immutable(scope: CacheScope, seconds: number): string {
  return `${scope}, max-age=${seconds}, immutable`;
}

/** An answer true for `seconds` (0: to be asked again each time). */
export function freshFor(scope: CacheScope, seconds: number): string {
  return seconds > 0 ? `${scope}, max-age=${seconds}` : 'no-cache';
}

export function stateTag(epoch: string, offset: number): string {
  return `"${epoch}:${offset}"`;
}

/** The offset of the state an If-None-Match of this epoch names (a list or `*` names none). */
export function heldOffset(ifNoneMatch: string | undefined, epoch: string): number | null {
  const match = ifNoneMatch === undefined ? null : /^\s*(?:W\/)?"([^"]*):(\d+)"\s*$/.exec(ifNoneMatch);
  if (!match || match[1] !== epoch) return null;
  const offset = Number(match[2]);
  return Number.isSafeInteger(offset) ? offset : null;
}

export const HISTORY_MAX_AGE_SECONDS = 31_536_000;
/** Followers ending their long polls within one such interval are sent on to the same URL (`cursor`). */
export const CURSOR_SECONDS = 20;

export interface ChangesPosition {
  after: number;
  epoch: string;
  gen?: string | undefined;
  prefix?: string | undefined;
  key?: string | undefined;
  limit: number;
  wait: number;
  cursor?: number | undefined;
}

/** A changes request's URL, parameters in one fixed order without defaults: followers at one position ask the same URL. */
export function changesUrl(position: ChangesPosition): string {
  const params = new URLSearchParams();
  params.set('after', String(position.after));
  if (position.cursor !== undefined) params.set('cursor', String(position.cursor));
  params.set('epoch', position.epoch);
  if (position.gen !== undefined) params.set('gen', position.gen);
  if (position.key !== undefined) params.set('key', position.key);
  params.set('limit', String(position.limit));
  if (position.prefix) params.set('prefix', position.prefix);
  if (position.wait > 0) params.set('wait', String(position.wait));
  return `/v1/changes?${params.toString()}`;
}

// The next request after a page, and how long caches may keep it: a page that moved the reader on is
// history; one that did not is kept a second and sends it on to a new `cursor`, never the URL just answered.
export function nextChanges(
  asked: ChangesPosition & { epochGiven: boolean },
  next: number,
  scope: CacheScope,
  now = Date.now(),
): { link: string; cacheControl: string } {
  const { epochGiven, cursor, ...position } = asked;
  // Without the epoch in its URL a page may be of an older epoch after a restore: kept a second only,
  // cacheable all the same, or a collapsing cache would send its waiting followers on one at a time.
  if (next > asked.after) {
    const link = changesUrl({ ...position, after: next });
    return { link, cacheControl: epochGiven ? immutable(scope, HISTORY_MAX_AGE_SECONDS) : freshFor(scope, 1) };
  }
  const interval = Math.floor(now / 1000 / CURSOR_SECONDS);
  const link = changesUrl({ ...position, after: next, cursor: Math.max(interval, (cursor ?? -1) + 1) });
  return { link, cacheControl: freshFor(scope, 1) };
}
