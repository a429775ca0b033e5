// At most STATELOG_MAX_WATCHERS long polls and change streams wait at once, and a client (its token, or
// without one its address) holds three quarters at most: a reader opening streams without end leaves others some.
import { ApiError } from '../contract/errors.js';
import { Slots } from '../snapshot/slots.js';

export interface WatcherClient {
  /** The client's address: the forwarded one when its proxy is trusted (STATELOG_TRUSTED_PROXIES). */
  ip: string;
  /** The token entry it was authenticated as; null with auth off. */
  tokenEntry: { name: string } | null;
}

export const watcherShare = (max: number): number => Math.max(1, Math.ceil((max * 3) / 4));

export class WatcherSlots extends Slots {
  readonly share: number;
  private readonly held = new Map<string, number>();

  constructor(max: number) {
    super(max, 'long polls and change streams are already open');
    this.share = watcherShare(max);
  }

  /** Takes a slot for the client that sent `req`, or throws 429 (its share, or all slots, taken). */
  acquireFor(req: WatcherClient): () => void {
    const owner = clientOf(req);
    if ((this.held.get(owner) ?? 0) >= this.share) {
      throw new ApiError(
        'too_many_requests',
        `this client already holds ${this.share} long polls and change streams, its share of STATELOG_MAX_WATCHERS; close one or retry in a moment`,
        { limit: this.share },
        { 'retry-after': '1' },
      );
    }
    const release = this.acquire();
    this.held.set(owner, (this.held.get(owner) ?? 0) + 1);
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      release();
      const left = this.held.get(owner)! - 1;
      if (left === 0) this.held.delete(owner);
      else this.held.set(owner, left);
    };
  }
}

/**
 * Who holds a slot: the token entry a request was authenticated as, else its address. Behind a proxy or a
 * NAT every client has one address, so an address counts only requests without a token; a bearer header
 * is not a token unless auth checked it, or any made-up one would be a new share.
 */
function clientOf(req: WatcherClient): string {
  return req.tokenEntry ? `token ${req.tokenEntry.name}` : `address ${req.ip}`;
}
