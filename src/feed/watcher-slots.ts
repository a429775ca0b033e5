// At most STATELOG_MAX_WATCHERS long polls and change streams wait at once, and a client (its token and
// its address, counted apart) holds three quarters at most: a reader opening streams without end leaves others some.
import { createHash } from 'node:crypto';
import { ApiError } from '../contract/errors.js';
import { Slots } from '../snapshot/slots.js';

export interface WatcherClient {
  ip: string;
  headers: { authorization?: string };
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
    const owners = clientsOf(req);
    for (const owner of owners) {
      if ((this.held.get(owner) ?? 0) >= this.share) {
        throw new ApiError(
          'too_many_requests',
          `this client already holds ${this.share} long polls and change streams, its share of STATELOG_MAX_WATCHERS; close one or retry in a moment`,
          { limit: this.share },
          { 'retry-after': '1' },
        );
      }
    }
    const release = this.acquire();
    for (const owner of owners) this.held.set(owner, (this.held.get(owner) ?? 0) + 1);
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      release();
      for (const owner of owners) {
        const left = this.held.get(owner)! - 1;
        if (left === 0) this.held.delete(owner);
        else this.held.set(owner, left);
      }
    };
  }
}

/** Who holds a slot: the client's address, and its bearer token (hashed, never kept) if it sent one. */
function clientsOf(req: WatcherClient): string[] {
  const owners = [`address ${req.ip}`];
  const authorization = req.headers.authorization;
  if (authorization?.startsWith('Bearer ')) owners.push(`token ${createHash('sha256').update(authorization.slice(7)).digest('base64url')}`);
  return owners;
}
