-- Consumers: named positions in the log kept for groups of workers (src/store/consumer-rules.ts).
-- `owner` is the scoped token entry that made the consumer ('' for unscoped callers), so that
-- each such token has names of its own. `epoch`: a row of another epoch (a restored file)
-- stands at offset 0.
CREATE TABLE consumers (
  owner TEXT NOT NULL,
  name TEXT NOT NULL,
  seq INTEGER NOT NULL,
  epoch TEXT NOT NULL,
  committed_at INTEGER NOT NULL,
  hold INTEGER NOT NULL CHECK (hold IN (0, 1)),
  hold_released_at INTEGER,
  PRIMARY KEY (owner, name)
) WITHOUT ROWID;
