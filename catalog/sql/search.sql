-- Run search: the function the index on runs' labels is built on. Go caller:
-- catalog/run.go.

-- cairn_label_pairs turns a run's labels into an array of 'key=value' texts (a key
-- holds no '='), which runs_labels_idx indexes instead of the jsonb: ANALYZE keeps
-- the frequency of each element of an indexed array (most common elements), so the
-- planner knows that tenant=acme is 0.1% of the runs and fetches them by this
-- index; for a jsonb containment it assumes 1% whatever the label, and walked the
-- primary key newest first through 100,000s of runs of other tenants. IMMUTABLE:
-- an index uses it (catalog's run search calls it too).
CREATE OR REPLACE FUNCTION cairn_label_pairs(p_labels jsonb) RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT coalesce(array_agg(k || '=' || v), '{}') FROM jsonb_each_text(p_labels) AS e(k, v)
$$;
