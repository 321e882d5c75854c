-- +goose Up
-- The whole catalog of DESIGN §4. Every state column is guarded by a CHECK, every
-- reference by a foreign key; indexes serve the claim query, the sweeper and the lists.

-- Fencing tokens: one per claim, monotonic across every dispatcher.
CREATE SEQUENCE lease_token_seq AS bigint;

CREATE TABLE workflows (
    name           text        PRIMARY KEY CHECK (name ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
    latest_version integer     NOT NULL DEFAULT 0 CHECK (latest_version >= 0),
    description    text        NOT NULL DEFAULT '',
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE bundles (
    digest     text        PRIMARY KEY CHECK (digest ~ '^sha256:[0-9a-f]{64}$'),
    size       bigint      NOT NULL CHECK (size >= 0),
    blob_key   text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE workflow_versions (
    workflow      text        NOT NULL REFERENCES workflows (name),
    version       integer     NOT NULL CHECK (version >= 1),
    bundle_digest text        NOT NULL UNIQUE REFERENCES bundles (digest),
    definition    jsonb       NOT NULL,
    fingerprint   text        NOT NULL CHECK (fingerprint ~ '^sha256:[0-9a-f]{64}$'),
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workflow, version)
);

-- Run ids are UUIDv7: time-ordered, so keyset pagination orders by id alone.
CREATE TABLE runs (
    id              uuid        PRIMARY KEY,
    workflow        text        NOT NULL,
    version         integer     NOT NULL,
    status          text        NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'running', 'succeeded', 'failed', 'canceled')),
    input           jsonb,
    error           jsonb,
    revision        bigint      NOT NULL DEFAULT 1 CHECK (revision >= 1),
    steps_total     integer     NOT NULL CHECK (steps_total >= 0),
    steps_remaining integer     NOT NULL CHECK (steps_remaining >= 0),
    created_at      timestamptz NOT NULL DEFAULT now(),
    started_at      timestamptz,
    finished_at     timestamptz,
    FOREIGN KEY (workflow, version) REFERENCES workflow_versions (workflow, version),
    CHECK ((status IN ('succeeded', 'failed', 'canceled')) = (finished_at IS NOT NULL))
) WITH (fillfactor = 80);

CREATE INDEX runs_workflow_id_idx ON runs (workflow, id DESC);
CREATE INDEX runs_status_id_idx ON runs (status, id DESC);
CREATE INDEX runs_workflow_status_id_idx ON runs (workflow, status, id DESC);
CREATE INDEX runs_unfinished_idx ON runs (id) WHERE status IN ('pending', 'running');

-- One row per step of a run: the queue. Rows flip state often, hence the fillfactor
-- (HOT updates); finished rows leave the partial claim and lease indexes.
CREATE TABLE steps (
    run_id           uuid        NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    key              text        NOT NULL CHECK (key ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    status           text        NOT NULL
                     CHECK (status IN ('waiting', 'ready', 'running', 'succeeded', 'failed', 'canceled', 'skipped')),
    needs            text[]      NOT NULL DEFAULT '{}',
    deps_remaining   integer     NOT NULL CHECK (deps_remaining >= 0),
    attempts         integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts     integer     NOT NULL CHECK (max_attempts >= 1),
    ready_at         timestamptz,
    lease_owner      text,
    lease_token      bigint,
    lease_expires_at timestamptz,
    last_error       jsonb,
    output           jsonb,
    checkpoint       jsonb,
    created_at       timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    finished_at      timestamptz,
    PRIMARY KEY (run_id, key),
    CHECK (status <> 'ready' OR ready_at IS NOT NULL),
    CHECK (status <> 'running' OR (lease_token IS NOT NULL AND lease_expires_at IS NOT NULL AND lease_owner IS NOT NULL))
) WITH (fillfactor = 70);

CREATE INDEX steps_claim_idx ON steps (ready_at) WHERE status = 'ready';
CREATE INDEX steps_lease_expiry_idx ON steps (lease_expires_at) WHERE status = 'running';

CREATE TABLE attempts (
    run_id      uuid        NOT NULL,
    step_key    text        NOT NULL,
    number      integer     NOT NULL CHECK (number >= 1),
    status      text        NOT NULL DEFAULT 'running'
                CHECK (status IN ('running', 'succeeded', 'failed', 'timed_out', 'interrupted', 'canceled')),
    dispatcher  text        NOT NULL,
    lease_token bigint      NOT NULL UNIQUE,
    counted     boolean     NOT NULL DEFAULT true,
    error       jsonb,
    log_key     text,
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    PRIMARY KEY (run_id, step_key, number),
    FOREIGN KEY (run_id, step_key) REFERENCES steps (run_id, key) ON DELETE CASCADE,
    CHECK ((status = 'running') = (finished_at IS NULL))
) WITH (fillfactor = 80);

-- Events of a run in commit order: every writer locks the run row (revision bump)
-- before it draws ids, so ids of one run grow in the order their transactions commit.
CREATE TABLE events (
    id         bigserial   PRIMARY KEY,
    run_id     uuid        NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    type       text        NOT NULL CHECK (type ~ '^[a-z][a-z_.]{0,62}$'),
    step_key   text,
    attempt    integer,
    data       jsonb       NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX events_run_id_idx ON events (run_id, id);

-- Idempotency records for writes that create. request_hash tells a replay of the same
-- request (first response returned) from a different one under the same key (409).
CREATE TABLE idempotency_keys (
    scope        text        NOT NULL,
    key          text        NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    request_hash text        NOT NULL,
    resource_id  text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, key)
);

-- +goose Down
DROP TABLE idempotency_keys;
DROP TABLE events;
DROP TABLE attempts;
DROP TABLE steps;
DROP TABLE runs;
DROP TABLE workflow_versions;
DROP TABLE bundles;
DROP TABLE workflows;
DROP SEQUENCE lease_token_seq;
