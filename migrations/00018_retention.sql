-- +goose Up
-- Retention (issue 18): finished runs are deleted once they have been finished
-- for longer than their workflow version's retention (cairn.yaml retention:, in
-- the definition), else the server's default. The reaper (catalog/retention.go)
-- deletes whole runs in small batches, oldest first, SKIP LOCKED; steps,
-- step_edges, attempts, events, signals, approvals and step_maps go with them
-- (ON DELETE CASCADE); operation_runs rows are deleted by the reaper itself.

-- The version's retention in seconds per status (-1: forever; NULL: the server's
-- default) and whether its runs are archived before deletion (NULL: the server's
-- setting), read from the definition.
ALTER TABLE workflow_versions
    ADD COLUMN retain_succeeded_s bigint GENERATED ALWAYS AS ((definition -> 'retention' ->> 'succeeded_s')::bigint) STORED,
    ADD COLUMN retain_failed_s    bigint GENERATED ALWAYS AS ((definition -> 'retention' ->> 'failed_s')::bigint) STORED,
    ADD COLUMN retain_canceled_s  bigint GENERATED ALWAYS AS ((definition -> 'retention' ->> 'canceled_s')::bigint) STORED,
    ADD COLUMN retain_archive     boolean GENERATED ALWAYS AS ((definition -> 'retention' ->> 'archive')::boolean) STORED;

-- The reaper walks finished runs oldest first.
CREATE INDEX runs_finished_at_idx ON runs (finished_at) WHERE finished_at IS NOT NULL;

-- Idempotency keys expire (default 24 h): the reaper deletes the expired ones
-- oldest first.
CREATE INDEX idempotency_keys_created_at_idx ON idempotency_keys (created_at);

-- Runs archived before their deletion: the archive (the run, its steps,
-- attempts and events as JSON Lines) is a blob of kind archives; this row finds it
-- by the run's id, and names it for the blob collector.
CREATE TABLE archived_runs (
    run_id      uuid        PRIMARY KEY,
    workflow    text        NOT NULL,
    status      text        NOT NULL,
    finished_at timestamptz NOT NULL,
    blob_key    text        NOT NULL,
    archived_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE archived_runs;
DROP INDEX idempotency_keys_created_at_idx;
DROP INDEX runs_finished_at_idx;
ALTER TABLE workflow_versions
    DROP COLUMN retain_archive,
    DROP COLUMN retain_canceled_s,
    DROP COLUMN retain_failed_s,
    DROP COLUMN retain_succeeded_s;
