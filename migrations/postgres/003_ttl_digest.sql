-- Per-key expiry and the state digest, as in migrations/sqlite/002_ttl_digest.sql.
ALTER TABLE state ADD COLUMN expires_at bigint;
CREATE INDEX state_expiry ON state (expires_at) WHERE expires_at IS NOT NULL;

-- A live key's term of the digest (src/contract/digest.ts): the first 8 bytes of
-- SHA-256 of '<offset>:<key>' as an unsigned 64-bit integer.
CREATE FUNCTION statelog_digest_term(p_key text, p_seq bigint) RETURNS numeric
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT CASE WHEN t < 0 THEN t + 18446744073709551616 ELSE t END FROM (
    SELECT ('x' || encode(substr(sha256(convert_to(p_seq::text || ':' || p_key, 'UTF8')), 1, 8), 'hex'))::bit(64)::bigint::numeric AS t
  ) h
$$;

-- The digest mod 2^64, kept by statelog_append; computed here for the state as it is.
ALTER TABLE meta ADD COLUMN digest numeric NOT NULL DEFAULT 0;
UPDATE meta SET digest = (SELECT coalesce(sum(statelog_digest_term(key, seq)), 0) FROM state WHERE live) % 18446744073709551616
WHERE id = 1;

-- statelog_append as in 002_append.sql, with each final state row's expiry
-- (p_state_expires, ms since the epoch or NULL) and the digest. Offsets are assigned
-- here, so the digest change is worked out here too: the records of a group that a
-- later record of the same key superseded add and remove the same term, so the change
-- is, over the keys written, + the final live record's term - the old live row's term.
DROP FUNCTION statelog_append(text[], bigint[], boolean[], text[], text[], text[], text[], bigint[], boolean[], bigint, bigint, boolean, bigint, text);
CREATE FUNCTION statelog_append(
  p_read_keys text[], p_read_seqs bigint[], p_read_lives boolean[],   -- state as read; seq NULL = no row
  p_rec_keys text[], p_rec_ops text[], p_rec_values text[],           -- records, in order
  p_state_keys text[], p_state_rels bigint[], p_state_lives boolean[], -- final state rows; rel = 1-based record index
  p_state_expires bigint[],                                            -- their expiry; NULL = none
  p_new_keys bigint, p_live_delta bigint, p_superseded boolean, p_now bigint,
  p_node text                                                          -- NOTIFY payload: '<head> <node>'
) RETURNS TABLE (out_base bigint, out_ts bigint) LANGUAGE plpgsql AS $$
DECLARE
  m meta%ROWTYPE;
  commit_ts bigint;
  delta numeric;
BEGIN
  SELECT * INTO m FROM meta WHERE id = 1 FOR UPDATE;
  IF EXISTS (
    SELECT 1 FROM unnest(p_read_keys, p_read_seqs, p_read_lives) AS r(key, seq, live)
      LEFT JOIN state s ON s.key = r.key
    WHERE s.seq IS DISTINCT FROM r.seq OR s.live IS DISTINCT FROM r.live
  ) THEN
    RETURN;
  END IF;
  commit_ts := greatest(p_now, m.last_ts);
  delta := coalesce((SELECT sum(statelog_digest_term(x.key, m.head + x.rel))
      FROM unnest(p_state_keys, p_state_rels, p_state_lives) AS x(key, rel, live) WHERE x.live), 0)
    - coalesce((SELECT sum(statelog_digest_term(s.key, s.seq)) FROM state s WHERE s.key = ANY(p_state_keys) AND s.live), 0);
  INSERT INTO log (seq, key, op, value, ts)
    SELECT m.head + r.n, r.key, r.op, r.value, commit_ts
    FROM unnest(p_rec_keys, p_rec_ops, p_rec_values) WITH ORDINALITY AS r(key, op, value, n);
  INSERT INTO state (key, seq, live, expires_at)
    SELECT x.key, m.head + x.rel, x.live, x.expires
    FROM unnest(p_state_keys, p_state_rels, p_state_lives, p_state_expires) AS x(key, rel, live, expires)
  ON CONFLICT (key) DO UPDATE SET seq = excluded.seq, live = excluded.live, expires_at = excluded.expires_at;
  UPDATE meta SET head = m.head + cardinality(p_rec_keys), last_ts = commit_ts,
    records = records + cardinality(p_rec_keys), state_keys = state_keys + p_new_keys,
    live_keys = live_keys + p_live_delta,
    digest = ((digest + delta) % 18446744073709551616 + 18446744073709551616) % 18446744073709551616,
    superseded_since = CASE WHEN p_superseded THEN coalesce(superseded_since, commit_ts) ELSE superseded_since END
  WHERE id = 1;
  PERFORM pg_notify('statelog_changes', (m.head + cardinality(p_rec_keys))::text || ' ' || p_node);
  out_base := m.head;
  out_ts := commit_ts;
  RETURN NEXT;
END
$$;
