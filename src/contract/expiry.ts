// When a key with a time to live stops counting: the one rule of GET, listings, stats, conditions,
// StateMirror and restore; both stores' SQL write it as `expires_at > now`.

/** True when a value with this expiry (ms since the epoch; null or absent: never) is past it at `now`. */
export function isExpired(expiresAt: number | null | undefined, now: number): boolean {
  return expiresAt != null && expiresAt <= now;
}
