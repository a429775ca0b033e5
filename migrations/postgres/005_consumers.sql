-- As migrations/sqlite/004_consumers.sql: named positions in the log kept for groups of workers.
CREATE TABLE consumers (
  owner text COLLATE "C" NOT NULL,
  name text COLLATE "C" NOT NULL,
  seq bigint NOT NULL,
  epoch text NOT NULL,
  committed_at bigint NOT NULL,
  hold boolean NOT NULL,
  hold_released_at bigint,
  PRIMARY KEY (owner, name)
);
