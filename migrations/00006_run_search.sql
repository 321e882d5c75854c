-- +goose Up
-- Labels and search (issue 13): runs carry labels given at start and, for the child
-- runs of a later issue, the run that started them; GET /v1/runs filters on both, on
-- the version, the creation time and the run's error code. Each filter is served by an
-- index (the statement is sqlRunList in catalog/run.go):
--   label=k=v          runs_labels_idx, GIN on cairn_label_pairs(labels): @> '{k=v}'
--   version            runs_workflow_version_id_idx (workflow, version, id DESC)
--   error_code         runs_error_code_idx, on error->'cause'->>'code' of failed runs
--   parent             runs_parent_id_idx (parent_id, id DESC), partial
--   created_after/before  bounds on id (run ids are UUIDv7, time-ordered): the primary key
-- The keys and values of labels are checked in Go (catalog.LabelProblem, one home
-- for the rules); the table only holds that labels is an object.

ALTER TABLE runs
    ADD COLUMN labels jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(labels) = 'object'),
    ADD COLUMN parent_id uuid REFERENCES runs (id) ON DELETE SET NULL;

-- Labels are indexed as an array of 'key=value' texts (a key holds no '='), not as
-- jsonb: ANALYZE keeps the frequency of each element of an indexed array (most
-- common elements), so the planner knows that tenant=acme is 0.1% of the runs and
-- fetches them by this index; for a jsonb containment it assumes 1% whatever the
-- label, and walked the primary key newest first through 100,000s of runs of other
-- tenants (the list bench: 16 ms at 50,000 runs instead of 1).
-- +goose StatementBegin
CREATE FUNCTION cairn_label_pairs(p_labels jsonb) RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT coalesce(array_agg(k || '=' || v), '{}') FROM jsonb_each_text(p_labels) AS e(k, v)
$$;
-- +goose StatementEnd
CREATE INDEX runs_labels_idx ON runs USING gin (cairn_label_pairs(labels));
CREATE INDEX runs_workflow_version_id_idx ON runs (workflow, version, id DESC);
-- The run's error code is the code of the step error that failed it:
-- cairn_run_settle writes {message, step, cause: <the step's last_error>}.
CREATE INDEX runs_error_code_idx ON runs ((error -> 'cause' ->> 'code'), id DESC) WHERE status = 'failed';
-- Also what ON DELETE SET NULL looks children up by.
CREATE INDEX runs_parent_id_idx ON runs (parent_id, id DESC) WHERE parent_id IS NOT NULL;

-- +goose Down
DROP INDEX runs_parent_id_idx;
DROP INDEX runs_error_code_idx;
DROP INDEX runs_workflow_version_id_idx;
DROP INDEX runs_labels_idx;
DROP FUNCTION cairn_label_pairs(jsonb);
ALTER TABLE runs DROP COLUMN parent_id, DROP COLUMN labels;
