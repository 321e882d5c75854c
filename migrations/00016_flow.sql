-- +goose Up
-- Flow control (issue 16): concurrency and rate limits per key.
--
-- A slot IS the running step: a step with a concurrency limit carries its limit's
-- name, its key (the CEL expression evaluated once, when the run's steps were
-- created) and the limit its definition gave; the slots of a key in use are its steps
-- with status running. Nothing else counts them, so nothing can leak: the claim takes
-- a slot in the statement that makes the step running, and whatever ends the lease
-- (finish, suspend, sweep, cancel) frees it in its own transaction.
--
-- The claim (catalog.StepClaim) serializes the claimers of one key with a
-- transaction-level advisory lock on (name, key), taken in a fixed order, and counts
-- the running steps after it holds the lock; releases take no lock.
ALTER TABLE steps ADD COLUMN conc_name text;
ALTER TABLE steps ADD COLUMN conc_key text;
ALTER TABLE steps ADD COLUMN conc_limit integer;
ALTER TABLE steps ADD CONSTRAINT steps_conc_check
    CHECK ((conc_name IS NULL) = (conc_key IS NULL) AND (conc_name IS NULL) = (conc_limit IS NULL)
           AND (conc_limit IS NULL OR conc_limit >= 1));
-- The slots in use per key: the claim's count, GET /v1/limits.
CREATE INDEX steps_conc_running_idx ON steps (conc_name, conc_key)
    WHERE status = 'running' AND conc_name IS NOT NULL;
-- The steps waiting for a slot (GET /v1/limits).
CREATE INDEX steps_conc_ready_idx ON steps (conc_name, conc_key)
    WHERE status = 'ready' AND conc_name IS NOT NULL;

-- Rate limits: a step with one carries its name, key, limit and window (seconds). The
-- tokens of each (name, key) are a bucket of `lim` tokens refilled evenly over
-- `per_s`: a claim takes one per step it starts, in its own transaction, under the
-- key's advisory lock (as for concurrency), so servers share one bucket exactly.
ALTER TABLE steps ADD COLUMN rate_name text;
ALTER TABLE steps ADD COLUMN rate_key text;
ALTER TABLE steps ADD COLUMN rate_limit integer;
ALTER TABLE steps ADD COLUMN rate_per_s double precision;
ALTER TABLE steps ADD CONSTRAINT steps_rate_check
    CHECK ((rate_name IS NULL) = (rate_key IS NULL) AND (rate_name IS NULL) = (rate_limit IS NULL)
           AND (rate_name IS NULL) = (rate_per_s IS NULL)
           AND (rate_limit IS NULL OR rate_limit >= 1) AND (rate_per_s IS NULL OR rate_per_s > 0));
-- The steps waiting for a token (the claim's hint of when to look again).
CREATE INDEX steps_rate_ready_idx ON steps (rate_name, rate_key)
    WHERE status = 'ready' AND rate_name IS NOT NULL;

-- rate_buckets: the tokens left at `at`, of a bucket of `lim` tokens refilled over
-- `per_s` seconds (the values of the latest claim's step).
CREATE TABLE rate_buckets (
    name   text             NOT NULL,
    key    text             NOT NULL,
    tokens double precision NOT NULL,
    at     timestamptz      NOT NULL,
    lim    integer          NOT NULL CHECK (lim >= 1),
    per_s  double precision NOT NULL CHECK (per_s > 0),
    PRIMARY KEY (name, key)
);

-- Priority: 0..9, higher first, the step's (its definition's, default 5) unless the
-- run's start gave one. The claim takes ready steps by priority, then age:
-- steps_claim_idx is rebuilt to serve that order.
ALTER TABLE steps ADD COLUMN priority smallint NOT NULL DEFAULT 5 CHECK (priority BETWEEN 0 AND 9);
DROP INDEX steps_claim_idx;
CREATE INDEX steps_claim_idx ON steps (priority DESC, ready_at) WHERE status = 'ready' AND NOT held;

-- Placement: a step with runs_on is claimed only by a dispatcher that has all its
-- tags (cairn serve --tags); NULL: by any.
ALTER TABLE steps ADD COLUMN runs_on text[];

-- dispatchers: every dispatcher's row, written when it starts and on each of its
-- heartbeats, removed when it stops cleanly. A dispatcher is live while its
-- heartbeat_at is recent (catalog.DispatcherLive); a ready step with runs_on that
-- no live dispatcher can claim is blocked_by no_dispatcher.
CREATE TABLE dispatchers (
    id           text        PRIMARY KEY,
    tags         text[]      NOT NULL DEFAULT '{}',
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now()
);

-- queue_timeout: the longest a ready step may wait to start (for a slot, a token or
-- a dispatcher), in seconds, from its ready_at (when it became claimable; waiting
-- is not an attempt). Past it, cairn_queue_timeouts fails it: code queue_timeout.
ALTER TABLE steps ADD COLUMN queue_timeout_s double precision CHECK (queue_timeout_s > 0);
CREATE INDEX steps_queue_timeout_idx ON steps (ready_at)
    WHERE status = 'ready' AND queue_timeout_s IS NOT NULL;

-- cairn_queue_timeouts fails up to p_limit ready steps (not held: a paused run's
-- wait is not the queue's) whose queue_timeout has passed, SKIP LOCKED: terminal,
-- last_error {"message", "code": "queue_timeout"}, dependents skipped, step.failed,
-- the run may end. Returns how many it failed. Lock order: steps, then the run's.
-- +goose StatementBegin
CREATE FUNCTION cairn_queue_timeouts(p_limit integer)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    r       record;
    n       integer := 0;
    v_err   jsonb;
    v_skip  integer;
BEGIN
    FOR r IN
        SELECT run_id, key, attempts, queue_timeout_s FROM steps
        WHERE status = 'ready' AND queue_timeout_s IS NOT NULL AND NOT held
          AND ready_at + make_interval(secs => queue_timeout_s) <= now()
        ORDER BY ready_at
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    LOOP
        v_err := jsonb_build_object('message',
            format('the step waited over its queue_timeout (%ss) to start', r.queue_timeout_s),
            'code', 'queue_timeout');
        UPDATE steps SET status = 'failed', finished_at = now(), last_error = v_err
        WHERE run_id = r.run_id AND key = r.key;
        v_skip := cairn_skip_dependents(r.run_id, r.key);
        PERFORM cairn_event(r.run_id, 'step.failed', r.key, r.attempts, jsonb_build_object('error', v_err));
        PERFORM cairn_run_settle(r.run_id, 1 + v_skip);
        n := n + 1;
    END LOOP;
    RETURN n;
END $$;
-- +goose StatementEnd

-- Run deadlines: a run not ended by deadline_at fails, code deadline_exceeded
-- (cairn_run_deadlines): the deadline given at its start, else its creation plus
-- the manifest's timeout (workflow_versions.run_timeout_ms, from the definition).
ALTER TABLE runs ADD COLUMN deadline_at timestamptz;
CREATE INDEX runs_deadline_idx ON runs (deadline_at)
    WHERE deadline_at IS NOT NULL AND status IN ('pending', 'running', 'paused');
ALTER TABLE workflow_versions ADD COLUMN run_timeout_ms bigint
    GENERATED ALWAYS AS ((definition ->> 'timeout_ms')::bigint) STORED;

-- cairn_run_deadlines fails up to p_limit unended runs whose deadline has passed,
-- SKIP LOCKED, as cairn_run_cancel cancels one (its running attempts end canceled,
-- its unfinished steps are canceled, dispatchers are told on cairn_cancel), but the
-- run fails: error {"message", "cause": {"code": "deadline_exceeded"}}, run.failed
-- {"reason": "deadline_exceeded"}. Returns how many it failed.
-- +goose StatementBegin
CREATE FUNCTION cairn_run_deadlines(p_limit integer)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    r record;
    n integer := 0;
BEGIN
    FOR r IN
        SELECT id, deadline_at FROM runs
        WHERE deadline_at <= now() AND status IN ('pending', 'running', 'paused')
        ORDER BY deadline_at
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    LOOP
        UPDATE attempts a SET status = 'canceled', finished_at = now(),
            error = jsonb_build_object('message', 'the run''s deadline passed', 'code', 'deadline_exceeded')
        FROM steps s
        WHERE s.run_id = r.id AND s.status = 'running'
          AND a.run_id = s.run_id AND a.step_key = s.key AND a.number = s.attempts AND a.status = 'running';
        UPDATE steps SET status = 'canceled', finished_at = now(),
            lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
        WHERE run_id = r.id AND status IN ('waiting', 'ready', 'running', 'suspended');
        UPDATE steps SET held = false WHERE run_id = r.id AND held;
        UPDATE runs SET status = 'failed', finished_at = now(), steps_remaining = 0, pause_reason = NULL,
            error = jsonb_build_object('message', format('the run''s deadline (%s) passed', r.deadline_at),
                                       'cause', jsonb_build_object('code', 'deadline_exceeded',
                                                                   'message', 'the run''s deadline passed'))
        WHERE id = r.id;
        PERFORM cairn_event(r.id, 'run.failed', NULL, NULL, jsonb_build_object('reason', 'deadline_exceeded'));
        PERFORM pg_notify('cairn_cancel', r.id::text);
        n := n + 1;
    END LOOP;
    RETURN n;
END $$;
-- +goose StatementEnd

-- The steps of a version that have a concurrency or rate limit, a priority,
-- runs_on or a queue_timeout, read from its definition (their definitions, in
-- order): creating a run reads these, never the definition.
ALTER TABLE workflow_versions ADD COLUMN flow_steps jsonb
    GENERATED ALWAYS AS (jsonb_path_query_array(definition,
        '$.steps[*] ? (exists(@.concurrency) || exists(@.rate_limit) || exists(@.priority) || exists(@.runs_on)
                        || exists(@.queue_timeout))')) STORED;

-- limits: a limit changed at run time (PUT /v1/limits/{name}); it replaces the limit
-- of every step that names it, running or to come, until changed again.
CREATE TABLE limits (
    name        text        PRIMARY KEY CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'),
    concurrency integer     NOT NULL CHECK (concurrency BETWEEN 1 AND 100000),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    updated_by  text        NOT NULL
);

-- +goose Down
DROP TABLE limits;
ALTER TABLE workflow_versions DROP COLUMN flow_steps;
DROP FUNCTION cairn_run_deadlines(integer);
ALTER TABLE workflow_versions DROP COLUMN run_timeout_ms;
DROP INDEX runs_deadline_idx;
ALTER TABLE runs DROP COLUMN deadline_at;
DROP FUNCTION cairn_queue_timeouts(integer);
DROP INDEX steps_queue_timeout_idx;
ALTER TABLE steps DROP COLUMN queue_timeout_s;
DROP TABLE dispatchers;
ALTER TABLE steps DROP COLUMN runs_on;
DROP INDEX steps_claim_idx;
CREATE INDEX steps_claim_idx ON steps (ready_at) WHERE status = 'ready' AND NOT held;
ALTER TABLE steps DROP COLUMN priority;
DROP TABLE rate_buckets;
DROP INDEX steps_rate_ready_idx;
ALTER TABLE steps DROP CONSTRAINT steps_rate_check;
ALTER TABLE steps DROP COLUMN rate_per_s;
ALTER TABLE steps DROP COLUMN rate_limit;
ALTER TABLE steps DROP COLUMN rate_key;
ALTER TABLE steps DROP COLUMN rate_name;
DROP INDEX steps_conc_ready_idx;
DROP INDEX steps_conc_running_idx;
ALTER TABLE steps DROP CONSTRAINT steps_conc_check;
ALTER TABLE steps DROP COLUMN conc_limit;
ALTER TABLE steps DROP COLUMN conc_key;
ALTER TABLE steps DROP COLUMN conc_name;
