-- cairn-phase: expand
-- cairn-locks: SHARE UPDATE EXCLUSIVE on steps, runs (CREATE INDEX CONCURRENTLY)
-- cairn-online: yes
-- The quotas' counts (catalog/sql/flow.sql, cairn_claim_usage and
-- cairn_run_quota): a namespace's running steps, and the runs it created in the
-- last minute. Each index holds the rows of namespaces other than default only
-- (default takes no quota: 00095), so that a step or run of default costs nothing
-- more to write. Built concurrently: steps and runs are large.
-- +goose NO TRANSACTION
-- +goose Up
CREATE INDEX CONCURRENTLY IF NOT EXISTS steps_quota_running_idx ON steps (quota_ns)
    WHERE (status = 'running') IS TRUE AND quota_ns IS NOT NULL;
CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_namespace_created_idx ON runs (cairn_namespace(workflow), created_at)
    WHERE strpos(workflow, '/') > 0;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS runs_namespace_created_idx;
DROP INDEX CONCURRENTLY IF EXISTS steps_quota_running_idx;
