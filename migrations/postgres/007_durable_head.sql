-- Appends no longer notify. A commit now appends without waiting for its WAL flush (the meta
-- row's lock is held for the append alone), so the head it would announce may not be durable
-- yet; each node announces heads once a barrier of its own has made them durable
-- (src/store/postgres/durable-head.ts). A NOTIFY would also hold PostgreSQL's lock on the
-- notification queue until the commit ends.
--
-- statelog_append as in 006_lineage.sql, without the NOTIFY.
CREATE OR REPLACE FUNCTION statelog_append(
  p_read_keys text[], p_read_seqs bigint[], p_read_lives boolean[],   -- state as read; seq NULL = no row
  p_rec_keys text[], p_rec_ops text[], p_rec_values text[],           -- records, in order
  p_state_keys text[], p_state_rels bigint[], p_state_lives boolean[], -- final state rows; rel = 1-based record index
  p_state_expires bigint[],                                            -- their expiry; NULL = none
  p_new_keys bigint, p_live_delta bigint, p_superseded boolean, p_now bigint,
  p_node text                                                          -- unused: kept for the signature
) RETURNS TABLE (out_base bigint, out_ts bigint) LANGUAGE plpgsql AS $$
DECLARE
  m meta%ROWTYPE;
  commit_ts bigint;
  delta numeric;
BEGIN
  SELECT * INTO m FROM meta WHERE id = 1 FOR UPDATE;
  PERFORM statelog_fence();
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
  out_base := m.head;
  out_ts := commit_ts;
  RETURN NEXT;
END
$$;
