-- The log, the current state derived from it, and the counters kept beside them, as in
-- migrations/sqlite/001_log.sql. `seq` is a record's offset (OFFSET is reserved in SQL).
-- Several statelog nodes share these tables; the meta row is also their write lock.

-- One row: the log's identity and the counters that every write transaction keeps
-- exact. Every write and every compaction step locks this row first, so the commits
-- that assign offsets are serialised and offsets are in commit order on every node.
CREATE TABLE meta (
  id integer PRIMARY KEY CHECK (id = 1),
  epoch text NOT NULL,
  head bigint NOT NULL DEFAULT 0,        -- highest offset ever assigned
  horizon bigint NOT NULL DEFAULT 0,     -- highest offset of a removed live tombstone
  last_ts bigint NOT NULL DEFAULT 0,     -- commit times never go backwards, whatever the nodes' clocks
  records bigint NOT NULL DEFAULT 0,     -- rows in log
  state_keys bigint NOT NULL DEFAULT 0,  -- rows in state (live keys + tombstoned keys)
  live_keys bigint NOT NULL DEFAULT 0,
  -- A lower bound of the commit time of the earliest write that superseded a record
  -- still in the log (null: none left). Shared, so every node's compaction timer sees it.
  superseded_since bigint
);
INSERT INTO meta (id, epoch) VALUES (1, replace(gen_random_uuid()::text, '-', ''));
-- Updated by every commit: room in its page keeps each update HOT (no index change),
-- and page pruning then reclaims old row versions without waiting for a vacuum.
ALTER TABLE meta SET (fillfactor = 10);

-- Keys compare with COLLATE "C": byte order of their UTF-8, as the contract lists them,
-- and prefix ranges can use the primary key index.
-- Values are JSON text exactly as the API returns it (text, not jsonb: jsonb would
-- reorder object members and rewrite numbers).
CREATE TABLE log (
  seq bigint PRIMARY KEY,
  key text COLLATE "C" NOT NULL,
  op text NOT NULL CHECK (op IN ('set', 'delete')),
  value text,                            -- JSON text; NULL for a delete marker
  ts bigint NOT NULL,
  CHECK ((op = 'set') = (value IS NOT NULL))
);
-- Compaction deletes rows in bulk; autovacuum makes their space reusable. The defaults
-- (a vacuum once 20% of the table is dead) would let a large log carry a large dead
-- fraction for a long time: vacuum after 2% (+1000 rows), and do not throttle it much.
-- Records are only ever inserted at the end and then deleted, so insert-triggered
-- vacuums (which only set visibility bits) are kept infrequent.
ALTER TABLE log SET (
  autovacuum_vacuum_scale_factor = 0.02,
  autovacuum_vacuum_threshold = 1000,
  autovacuum_vacuum_cost_delay = 1,
  autovacuum_vacuum_insert_scale_factor = 0.2,
  autovacuum_analyze_scale_factor = 0.05
);

-- Each key's latest record, kept in the same transaction as every append, so reads,
-- listings and snapshots never scan superseded history.
CREATE TABLE state (
  key text COLLATE "C" PRIMARY KEY,
  seq bigint NOT NULL,
  live boolean NOT NULL
);
-- Every write updates a row here; free room in each page keeps those updates HOT.
ALTER TABLE state SET (fillfactor = 85, autovacuum_vacuum_scale_factor = 0.05);

CREATE TABLE idempotency (
  key text COLLATE "C" PRIMARY KEY,
  fingerprint text NOT NULL,
  answer text NOT NULL,                  -- JSON of {status, headers, body}
  expires_at bigint NOT NULL
);
CREATE INDEX idempotency_expiry ON idempotency (expires_at);
