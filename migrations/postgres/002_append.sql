-- Writes a group that a node planned (src/store/write-plan.ts): only what must happen
-- inside the database. It locks the meta row, so offsets stay in commit order; checks
-- that every key the plan read still has the state row it read (a plpgsql statement
-- after the lock sees every commit before it), and if one changed, writes nothing and
-- returns no row, and the node plans again under the lock; otherwise appends the
-- records at head + 1..., updates the state rows and the counters, and NOTIFYs.
-- Called as one autocommit statement for a plan made from an unlocked read, so the lock
-- is held only for this function and the commit's WAL flush; a plan made under the lock
-- calls it with nothing to verify. Parameters are prefixed p_ so none shadows a column.
CREATE FUNCTION statelog_append(
  p_read_keys text[], p_read_seqs bigint[], p_read_lives boolean[],   -- state as read; seq NULL = no row
  p_rec_keys text[], p_rec_ops text[], p_rec_values text[],           -- records, in order
  p_state_keys text[], p_state_rels bigint[], p_state_lives boolean[], -- final state rows; rel = 1-based record index
  p_new_keys bigint, p_live_delta bigint, p_superseded boolean, p_now bigint,
  p_node text                                                          -- NOTIFY payload: '<head> <node>'
) RETURNS TABLE (out_base bigint, out_ts bigint) LANGUAGE plpgsql AS $$
DECLARE
  m meta%ROWTYPE;
  commit_ts bigint;
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
  INSERT INTO log (seq, key, op, value, ts)
    SELECT m.head + r.n, r.key, r.op, r.value, commit_ts
    FROM unnest(p_rec_keys, p_rec_ops, p_rec_values) WITH ORDINALITY AS r(key, op, value, n);
  INSERT INTO state (key, seq, live)
    SELECT x.key, m.head + x.rel, x.live FROM unnest(p_state_keys, p_state_rels, p_state_lives) AS x(key, rel, live)
  ON CONFLICT (key) DO UPDATE SET seq = excluded.seq, live = excluded.live;
  UPDATE meta SET head = m.head + cardinality(p_rec_keys), last_ts = commit_ts,
    records = records + cardinality(p_rec_keys), state_keys = state_keys + p_new_keys,
    live_keys = live_keys + p_live_delta,
    superseded_since = CASE WHEN p_superseded THEN coalesce(superseded_since, commit_ts) ELSE superseded_since END
  WHERE id = 1;
  PERFORM pg_notify('statelog_changes', (m.head + cardinality(p_rec_keys))::text || ' ' || p_node);
  out_base := m.head;
  out_ts := commit_ts;
  RETURN NEXT;
END
$$;
