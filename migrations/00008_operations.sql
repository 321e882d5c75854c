-- +goose Up
-- Bulk operations (POST /v1/runs:bulk): an action applied to every run a filter
-- matched when the operation was created, in small batches, by whichever server
-- holds the operation's lease. Exactly once per run: a batch applies the action to
-- its runs, records each in operation_runs (primary key: a run is recorded once)
-- and moves the cursor, in one transaction; a server that dies mid-batch leaves
-- nothing of that batch, and the next holder of the lease starts it again.
CREATE TABLE operations (
    id               uuid        PRIMARY KEY,
    action           text        NOT NULL CHECK (action IN ('cancel', 'retry', 'pause', 'resume')),
    -- The filter as the list takes it (workflow, status, labels, …), stored as given.
    filter           jsonb       NOT NULL,
    -- The newest run id the operation may touch: the runs created after it are not
    -- its business. Run ids are UUIDv7 (time-ordered); the batches walk down from
    -- here, newest first, as GET /v1/runs lists.
    bound            uuid        NOT NULL,
    -- The last run id a batch processed; NULL before the first batch.
    cursor           uuid,
    status           text        NOT NULL DEFAULT 'running'
                     CHECK (status IN ('running', 'succeeded', 'failed', 'canceled')),
    actor            text        NOT NULL,
    -- Runs the filter matched when the operation was created (progress), and the
    -- runs processed so far: applied, or skipped (the action did not apply to the
    -- run's state; operation_runs says why).
    total            integer     NOT NULL CHECK (total >= 0),
    processed        integer     NOT NULL DEFAULT 0 CHECK (processed >= 0),
    applied          integer     NOT NULL DEFAULT 0 CHECK (applied >= 0),
    skipped          integer     NOT NULL DEFAULT 0 CHECK (skipped >= 0),
    error            jsonb,
    lease_owner      text,
    lease_expires_at timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz,
    CHECK ((status = 'running') = (finished_at IS NULL)),
    CHECK (processed = applied + skipped)
);

-- The operations servers look for work in.
CREATE INDEX operations_running_idx ON operations (created_at) WHERE status = 'running';

-- What an operation did to each run.
CREATE TABLE operation_runs (
    operation_id uuid        NOT NULL REFERENCES operations (id) ON DELETE CASCADE,
    run_id       uuid        NOT NULL,
    outcome      text        NOT NULL CHECK (outcome IN ('applied', 'skipped')),
    detail       text        NOT NULL DEFAULT '',
    at           timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (operation_id, run_id)
);

-- +goose Down
DROP TABLE operation_runs;
DROP TABLE operations;
