-- Per-key expiry and the state digest.
-- state.expires_at: when the key's live value expires (ms since the epoch; NULL: never),
-- set by the same upsert as every write, so a write without a TTL clears it. The
-- partial index holds only keys with an expiry: the expirer finds the due ones in order.
ALTER TABLE state ADD COLUMN expires_at INTEGER;
CREATE INDEX state_expiry ON state (expires_at) WHERE expires_at IS NOT NULL;
-- The digest of the live state (src/contract/digest.ts) as 16 hex digits, kept by every
-- write transaction. NULL until the store computes it from the state rows at start-up
-- (SQLite has no SHA-256 to do it here).
ALTER TABLE meta ADD COLUMN digest TEXT;
