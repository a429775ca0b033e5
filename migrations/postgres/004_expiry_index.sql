-- As migrations/sqlite/003_expiry_index.sql: the expirer's read of due keys by the
-- expiry index alone (an index-only scan where the visibility map allows).
DROP INDEX state_expiry;
CREATE INDEX state_expiry ON state (expires_at) INCLUDE (key, seq) WHERE expires_at IS NOT NULL;
