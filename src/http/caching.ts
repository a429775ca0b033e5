// What an answer tells the HTTP caches in front. Answers that any reader may have are
// `public`; with tokens set they are `private`, so no shared cache hands one to a request
// that the server would refuse (a revoked token, another scope, no token at all).
import type { Config } from '../config.js';

export type CacheScope = 'public' | 'private';

export function cacheScope(config: Config): CacheScope {
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
