-- The expiry index also holds each row's seq: the expirer's read of due keys (key and
-- seq, in expiry order) is then answered by the index alone, without a lookup of each
-- state row. Only live rows have an expiry (a delete or a write without a TTL clears it).
DROP INDEX state_expiry;
CREATE INDEX state_expiry ON state (expires_at, seq) WHERE expires_at IS NOT NULL;
