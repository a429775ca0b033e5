// What an answer tells the HTTP caches in front. Answers that any reader may have are
// `public`; with tokens set they are `private`, so no shared cache hands one to a request
// that the server would refuse (a revoked token, another scope, no token at all).
import type { Config } from '../config.js';

export type CacheScope = 'public' | 'private';

export function cacheScope(config: Pick<Config, 'tokens'>): CacheScope {
  return config.tokens ? 'private' : 'public';
}

/** An answer that stays true for ever: a page of history. */
export function immutable(scope: CacheScope, seconds: number): string {
  return `${scope}, max-age=${seconds}, immutable`;
}

/** An answer true for `seconds` (0: to be asked again each time). */
export function freshFor(scope: CacheScope, seconds: number): string {
  return seconds > 0 ? `${scope}, max-age=${seconds}` : 'no-cache';
}

/** A snapshot's entity tag: its state, named by epoch and offset. */
export function stateTag(epoch: string, offset: number): string {
  return `"${epoch}:${offset}"`;
}

/**
 * The offset of the state an If-None-Match names, when it is of this epoch: the client
 * holds that state. A list or `*` names nothing in particular and gives null.
 */
export function heldOffset(ifNoneMatch: string | undefined, epoch: string): number | null {
  const match = ifNoneMatch === undefined ? null : /^\s*(?:W\/)?"([^"]*):(\d+)"\s*$/.exec(ifNoneMatch);
  if (!match || match[1] !== epoch) return null;
  const offset = Number(match[2]);
  return Number.isSafeInteger(offset) ? offset : null;
}

/** How long caches may keep a page of history: it never changes. */
export const HISTORY_MAX_AGE_SECONDS = 31_536_000;
/**
 * Followers that waited at the head until their long poll ended are sent on with a
 * `cursor` that names this interval: those ending within one interval ask the same URL.
 */
export const CURSOR_SECONDS = 20;

/** What a changes request asked for, as its URL names it. */
export interface ChangesPosition {
  after: number;
  epoch: string;
  prefix?: string | undefined;
  key?: string | undefined;
  limit: number;
  wait: number;
  cursor?: number | undefined;
}

/**
 * The URL of a changes request, its parameters in one fixed order (omitting those at
 * their default), so that followers at the same position ask the very same URL.
 */
export function changesUrl(position: ChangesPosition): string {
  const params = new URLSearchParams();
  params.set('after', String(position.after));
  if (position.cursor !== undefined) params.set('cursor', String(position.cursor));
  params.set('epoch', position.epoch);
  if (position.key !== undefined) params.set('key', position.key);
  params.set('limit', String(position.limit));
  if (position.prefix) params.set('prefix', position.prefix);
  if (position.wait > 0) params.set('wait', String(position.wait));
  return `/v1/changes?${params.toString()}`;
}

/**
 * The next request after a page, and how long caches may keep the page. A page that
 * moved the reader on is history, the same for ever. A page that did not (a long poll
 * that ended at the head) is kept a second at most, and sends the reader on to a URL
 * with a new `cursor`, never the one just answered: a cache cannot hold it back.
 */
export function nextChanges(
  asked: ChangesPosition & { epochGiven: boolean },
  next: number,
  scope: CacheScope,
  now = Date.now(),
): { link: string; cacheControl: string } {
  const { epochGiven, cursor, ...position } = asked;
  // Without the epoch in its URL a page may be of an older epoch after a restore, so it
  // is kept a second only; cacheable all the same, or a collapsing cache would make the
  // followers waiting on it ask the server one after another.
  if (next > asked.after) {
    const link = changesUrl({ ...position, after: next });
    return { link, cacheControl: epochGiven ? immutable(scope, HISTORY_MAX_AGE_SECONDS) : freshFor(scope, 1) };
  }
  const interval = Math.floor(now / 1000 / CURSOR_SECONDS);
  const link = changesUrl({ ...position, after: next, cursor: Math.max(interval, (cursor ?? -1) + 1) });
  return { link, cacheControl: freshFor(scope, 1) };
}
