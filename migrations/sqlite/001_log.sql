-- The log, the current state derived from it, and the counters kept beside them.
-- `seq` is a record's offset (OFFSET is a reserved word in SQL).

-- One row: the log's identity and the counters that every write transaction keeps
-- exact, so that stats never need COUNT(*).
CREATE TABLE meta (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  epoch TEXT NOT NULL,
  head INTEGER NOT NULL DEFAULT 0,      -- highest offset ever assigned
  horizon INTEGER NOT NULL DEFAULT 0,   -- highest offset of a removed live tombstone
  last_ts INTEGER NOT NULL DEFAULT 0,   -- commit times never go backwards
  records INTEGER NOT NULL DEFAULT 0,   -- rows in log
  state_keys INTEGER NOT NULL DEFAULT 0, -- rows in state (live keys + tombstoned keys)
  live_keys INTEGER NOT NULL DEFAULT 0
);
INSERT INTO meta (id, epoch) VALUES (1, lower(hex(randomblob(16))));

-- Offsets are assigned from meta.head, never by rowid, so they are never reused even
-- after the highest record is removed.
CREATE TABLE log (
  seq INTEGER PRIMARY KEY,
  key TEXT NOT NULL,
  op TEXT NOT NULL CHECK (op IN ('set', 'delete')),
  value TEXT,                           -- JSON text; NULL for a delete marker
  ts INTEGER NOT NULL,
  CHECK ((op = 'set') = (value IS NOT NULL))
);

-- Each key's latest record, kept in the same transaction as every append, so reads,
-- listings and snapshots never scan superseded history.
CREATE TABLE state (
  key TEXT PRIMARY KEY,
  seq INTEGER NOT NULL,
  live INTEGER NOT NULL CHECK (live IN (0, 1))
) WITHOUT ROWID;

CREATE TABLE idempotency (
  key TEXT PRIMARY KEY,
  fingerprint TEXT NOT NULL,
  answer TEXT NOT NULL,                 -- JSON of {status, headers, body}
  expires_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX idempotency_expiry ON idempotency (expires_at);
