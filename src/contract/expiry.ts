// When a key with a time to live stops counting: the one rule that GET, listings,
// stats, the write conditions, StateMirror and restore all apply. The SQL of both
// stores writes the same comparison as `expires_at > now` (live) and
// `expires_at <= now` (expired).

/** True when a value with this expiry (ms since the epoch; null or absent: never) is past it at `now`. */
export function isExpired(expiresAt: number | null | undefined, now: number): boolean {
  return expiresAt != null && expiresAt <= now;
}
