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
    -- The steps a run of this version starts with, as parallel arrays (needs
    -- comma-joined), so creating a run is one statement that reads no definition.
    step_keys         text[]    NOT NULL DEFAULT '{}',
    step_needs        text[]    NOT NULL DEFAULT '{}',
    step_max_attempts integer[] NOT NULL DEFAULT '{}',
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workflow, version),
    CHECK (cardinality(step_keys) = cardinality(step_needs)
           AND cardinality(step_keys) = cardinality(step_max_attempts))
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
    revision        bigint      NOT NULL DEFAULT 0 CHECK (revision >= 0),
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
    -- Attempts that count against max_attempts: a lease handed back at shutdown
    -- does not.
    counted_attempts integer     NOT NULL DEFAULT 0 CHECK (counted_attempts >= 0),
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

-- The DAG of each run as edges, so a finishing step finds its dependents by index:
-- scanning needs arrays would cost every part of a wide fan-in the whole run.
CREATE TABLE step_edges (
    run_id   uuid NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    from_key text NOT NULL,
    to_key   text NOT NULL,
    PRIMARY KEY (run_id, from_key, to_key)
);
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

-- Events of a run. seq is the run's revision after the event: every event bumps
-- runs.revision under the run's row lock (cairn_event), so the seqs of a run are
-- 1, 2, 3, … in commit order, without gaps: what SSE replay from Last-Event-ID needs.
CREATE TABLE events (
    run_id     uuid        NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq        bigint      NOT NULL CHECK (seq >= 1),
    type       text        NOT NULL CHECK (type ~ '^[a-z][a-z_.]{0,62}$'),
    step_key   text,
    attempt    integer,
    data       jsonb       NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, seq)
);

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

-- The state machine of DESIGN §4 as functions: each transition is one round trip, and
-- the rules (fencing, retry budget, readiness of dependents, skipping, the run's final
-- state, events) live in one place. The SQL that calls them is in package catalog.

-- cairn_event appends an event to a run, bumping its revision.
-- +goose StatementBegin
CREATE FUNCTION cairn_event(p_run uuid, p_type text, p_step text, p_attempt integer, p_data jsonb)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_seq bigint;
BEGIN
    UPDATE runs SET revision = revision + 1 WHERE id = p_run RETURNING revision INTO v_seq;
    INSERT INTO events (run_id, seq, type, step_key, attempt, data)
    VALUES (p_run, v_seq, p_type, p_step, p_attempt, coalesce(p_data, '{}'));
    RETURN v_seq;
END $$;
-- +goose StatementEnd

-- cairn_run_settle counts p_done more steps of a run as terminal; when none remain,
-- the run ends: failed if a step failed, else succeeded. With p_done = 0 it only
-- ends a run that has no steps left.
-- +goose StatementBegin
CREATE FUNCTION cairn_run_settle(p_run uuid, p_done integer)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_remaining integer;
    v_failed    record;
BEGIN
    UPDATE runs SET steps_remaining = greatest(steps_remaining - p_done, 0)
    WHERE id = p_run AND status IN ('pending', 'running')
    RETURNING steps_remaining INTO v_remaining;
    IF v_remaining IS DISTINCT FROM 0 THEN
        RETURN;
    END IF;
    SELECT key, last_error INTO v_failed FROM steps
    WHERE run_id = p_run AND status = 'failed'
    ORDER BY finished_at, key LIMIT 1;
    IF FOUND THEN
        UPDATE runs SET status = 'failed', finished_at = now(),
            error = jsonb_build_object('message', 'step ' || v_failed.key || ' failed',
                                       'step', v_failed.key, 'cause', v_failed.last_error)
        WHERE id = p_run;
        PERFORM cairn_event(p_run, 'run.failed', NULL, NULL, jsonb_build_object('step', v_failed.key));
    ELSE
        UPDATE runs SET status = 'succeeded', finished_at = now() WHERE id = p_run;
        PERFORM cairn_event(p_run, 'run.succeeded', NULL, NULL, '{}');
    END IF;
END $$;
-- +goose StatementEnd

-- cairn_skip_dependents marks every transitive dependent of a step that did not
-- succeed as skipped and returns how many.
-- +goose StatementBegin
CREATE FUNCTION cairn_skip_dependents(p_run uuid, p_key text)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_keys text[];
BEGIN
    WITH RECURSIVE d(key) AS (
        SELECT e.to_key FROM step_edges e WHERE e.run_id = p_run AND e.from_key = p_key
        UNION
        SELECT e.to_key FROM step_edges e JOIN d ON e.from_key = d.key WHERE e.run_id = p_run
    ), skipped AS (
        UPDATE steps SET status = 'skipped', finished_at = now(),
            last_error = jsonb_build_object('message', 'upstream step ' || p_key || ' did not succeed')
        WHERE run_id = p_run AND key IN (SELECT key FROM d) AND status IN ('waiting', 'ready')
        RETURNING key
    )
    SELECT coalesce(array_agg(key ORDER BY key), '{}') INTO v_keys FROM skipped;
    IF cardinality(v_keys) > 0 THEN
        PERFORM cairn_event(p_run, 'step.skipped', NULL, NULL,
            jsonb_build_object('steps', to_jsonb(v_keys), 'because', p_key));
    END IF;
    RETURN cardinality(v_keys);
END $$;
-- +goose StatementEnd

-- cairn_step_finish records the end of an attempt, fenced by its lease token.
-- p_outcome: succeeded, failed, timed_out, interrupted (count against the budget),
-- handback (interrupted, does not count, ready at once) or infra_failed (Cairn's own
-- infrastructure failed, not the handler: the attempt is failed but does not count,
-- and the step is ready again at p_retry_at). A retryable failure with budget left
-- returns the step to ready at p_retry_at; otherwise the step fails and its
-- dependents are skipped. Returns 'ok', or 'lease_lost' when the token is not the
-- step's current lease (nothing is written then).
--
-- It is on the hot path: the common case is five statements (the step, its attempt,
-- its dependents, the run, the event), each touching only the rows it must.
-- +goose StatementBegin
CREATE FUNCTION cairn_step_finish(p_run uuid, p_key text, p_token bigint, p_outcome text,
                                  p_output jsonb, p_error jsonb, p_retryable boolean,
                                  p_retry_at timestamptz, p_log_key text)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_status   text;
    v_attempt  integer;
    v_ready_at timestamptz := greatest(coalesce(p_retry_at, now()), now());
    v_done     integer := 0;
    v_ready    integer := 0;
    v_type     text;
    v_data     jsonb;
    v_rev      bigint;
    v_left     integer;
BEGIN
    -- The fenced transition: decided from the row's current values in one UPDATE.
    UPDATE steps SET
        status = CASE
            WHEN p_outcome = 'succeeded' THEN 'succeeded'
            WHEN p_outcome IN ('handback', 'infra_failed') THEN 'ready'
            WHEN p_retryable AND counted_attempts < max_attempts THEN 'ready'
            ELSE 'failed' END,
        output = CASE WHEN p_outcome = 'succeeded' THEN p_output ELSE output END,
        last_error = CASE WHEN p_outcome IN ('succeeded', 'handback') THEN last_error ELSE p_error END,
        counted_attempts = CASE WHEN p_outcome IN ('handback', 'infra_failed')
                                THEN counted_attempts - 1 ELSE counted_attempts END,
        ready_at = CASE
            WHEN p_outcome = 'handback' THEN now()
            WHEN p_outcome = 'infra_failed' OR (p_outcome <> 'succeeded' AND p_retryable AND counted_attempts < max_attempts)
                THEN v_ready_at
            ELSE ready_at END,
        finished_at = CASE
            WHEN p_outcome = 'succeeded' OR NOT (p_outcome IN ('handback', 'infra_failed')
                 OR (p_retryable AND counted_attempts < max_attempts)) THEN now()
            ELSE finished_at END,
        lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
    WHERE run_id = p_run AND key = p_key AND lease_token = p_token AND status = 'running'
    RETURNING status, attempts INTO v_status, v_attempt;
    IF NOT FOUND THEN
        RETURN 'lease_lost';
    END IF;

    UPDATE attempts SET
        status = CASE p_outcome WHEN 'handback' THEN 'interrupted' WHEN 'infra_failed' THEN 'failed' ELSE p_outcome END,
        finished_at = now(), error = p_error, log_key = p_log_key,
        counted = (p_outcome NOT IN ('handback', 'infra_failed'))
    WHERE run_id = p_run AND step_key = p_key AND number = v_attempt;

    IF v_status = 'succeeded' THEN
        WITH deps AS (
            UPDATE steps s SET deps_remaining = s.deps_remaining - 1,
                status = CASE WHEN s.deps_remaining = 1 THEN 'ready' ELSE s.status END,
                ready_at = CASE WHEN s.deps_remaining = 1 THEN now() ELSE s.ready_at END
            FROM step_edges e
            WHERE e.run_id = p_run AND e.from_key = p_key
              AND s.run_id = p_run AND s.key = e.to_key AND s.status = 'waiting'
            RETURNING s.status
        )
        SELECT count(*) FILTER (WHERE status = 'ready') INTO v_ready FROM deps;
        v_done := 1;
        v_type := 'step.succeeded';
        v_data := CASE WHEN jsonb_typeof(p_output) = 'object' AND p_output ? '$blob'
                       THEN jsonb_build_object('output', p_output) ELSE '{}'::jsonb END;
    ELSIF v_status = 'ready' THEN
        v_ready := 1;
        IF p_outcome = 'handback' THEN
            v_type := 'step.handed_back';
            v_data := '{}'::jsonb;
        ELSE
            v_type := 'step.retrying';
            v_data := jsonb_build_object('attempt_status', CASE p_outcome WHEN 'infra_failed' THEN 'failed' ELSE p_outcome END,
                                         'error', p_error, 'ready_at', v_ready_at,
                                         'counted', p_outcome <> 'infra_failed');
        END IF;
    ELSE
        v_done := 1;
        v_type := 'step.failed';
        v_data := jsonb_build_object('attempt_status', p_outcome, 'error', p_error);
    END IF;

    -- One update of the run: its revision (the event's seq) and, for a terminal
    -- step, the count of steps left.
    UPDATE runs SET revision = revision + 1, steps_remaining = greatest(steps_remaining - v_done, 0)
    WHERE id = p_run
    RETURNING revision, steps_remaining INTO v_rev, v_left;
    INSERT INTO events (run_id, seq, type, step_key, attempt, data)
    VALUES (p_run, v_rev, v_type, p_key, v_attempt, v_data);

    IF v_status = 'failed' THEN
        -- Rare: skip the dependents, count them as done too, maybe end the run.
        PERFORM cairn_run_settle(p_run, cairn_skip_dependents(p_run, p_key));
    ELSIF v_done > 0 AND v_left = 0 THEN
        PERFORM cairn_run_settle(p_run, 0);
    END IF;
    IF v_ready > 0 THEN
        PERFORM pg_notify('cairn_steps', '');
    END IF;
    RETURN 'ok';
END $$;
-- +goose StatementEnd

-- cairn_steps_succeed records a batch of successful attempts, set-based: the common
-- case of a group commit in a handful of statements whatever the batch size. Each
-- item is fenced by its lease token; it returns the ordinals (1-based) of the items
-- written, the others lost their lease. Dependents are readied by how many of their
-- needs the batch completed; each run gets one revision bump for its events.
-- +goose StatementBegin
CREATE FUNCTION cairn_steps_succeed(p_runs uuid[], p_keys text[], p_tokens bigint[],
                                    p_outputs text[], p_log_keys text[])
RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    v_ords  bigint[];
    v_ended uuid[];
    v_ready bigint;
BEGIN
    WITH b AS (
        SELECT * FROM unnest(p_runs, p_keys, p_tokens, p_outputs, p_log_keys)
            WITH ORDINALITY AS b(run_id, key, token, output, log_key, ord)
    ), done AS (
        UPDATE steps s SET status = 'succeeded', output = b.output::jsonb, finished_at = now(),
            lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
        FROM b
        WHERE s.run_id = b.run_id AND s.key = b.key AND s.lease_token = b.token AND s.status = 'running'
        RETURNING s.run_id, s.key, s.attempts, b.ord, b.log_key, b.output::jsonb AS output
    ), att AS (
        UPDATE attempts a SET status = 'succeeded', finished_at = now(), log_key = d.log_key
        FROM done d
        WHERE a.run_id = d.run_id AND a.step_key = d.key AND a.number = d.attempts
    ), dec AS (
        SELECT e.run_id, e.to_key, count(*) AS n
        FROM done d JOIN step_edges e ON e.run_id = d.run_id AND e.from_key = d.key
        GROUP BY e.run_id, e.to_key
    ), deps AS (
        UPDATE steps s SET deps_remaining = s.deps_remaining - dec.n,
            status = CASE WHEN s.deps_remaining = dec.n THEN 'ready' ELSE s.status END,
            ready_at = CASE WHEN s.deps_remaining = dec.n THEN now() ELSE s.ready_at END
        FROM dec
        WHERE s.run_id = dec.run_id AND s.key = dec.to_key AND s.status = 'waiting'
        RETURNING s.status
    ), per_run AS (
        SELECT run_id, count(*) AS n FROM done GROUP BY run_id
    ), r AS (
        UPDATE runs SET revision = runs.revision + p.n,
            steps_remaining = greatest(runs.steps_remaining - p.n, 0)
        FROM per_run p WHERE runs.id = p.run_id
        RETURNING runs.id, runs.revision, p.n, runs.steps_remaining
    ), ev AS (
        INSERT INTO events (run_id, seq, type, step_key, attempt, data)
        SELECT d.run_id, r.revision - r.n + row_number() OVER (PARTITION BY d.run_id ORDER BY d.key),
               'step.succeeded', d.key, d.attempts,
               CASE WHEN jsonb_typeof(d.output) = 'object' AND d.output ? '$blob'
                    THEN jsonb_build_object('output', d.output) ELSE '{}'::jsonb END
        FROM done d JOIN r ON r.id = d.run_id
    )
    SELECT coalesce(array_agg(d.ord), '{}'),
           coalesce(array_agg(DISTINCT d.run_id) FILTER (WHERE r.steps_remaining = 0), '{}'),
           (SELECT count(*) FROM deps WHERE deps.status = 'ready')
    INTO v_ords, v_ended, v_ready
    FROM done d JOIN r ON r.id = d.run_id;

    PERFORM cairn_run_settle(x, 0) FROM unnest(v_ended) AS x;
    IF v_ready > 0 THEN
        PERFORM pg_notify('cairn_steps', '');
    END IF;
    RETURN v_ords;
END $$;
-- +goose StatementEnd

-- cairn_sweep returns steps whose lease expired (their dispatcher died or lost the
-- database) to ready with the attempt interrupted, or fails them when no attempts
-- remain. Safe to run from every dispatcher at once (SKIP LOCKED).
-- +goose StatementBegin
CREATE FUNCTION cairn_sweep(p_limit integer)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    r record;
    n integer := 0;
BEGIN
    FOR r IN
        SELECT run_id, key, lease_token FROM steps
        WHERE status = 'running' AND lease_expires_at < now()
        ORDER BY lease_expires_at
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    LOOP
        PERFORM cairn_step_finish(r.run_id, r.key, r.lease_token, 'interrupted', NULL,
            jsonb_build_object('message', 'lease expired: the dispatcher holding the step stopped or lost the database',
                               'code', 'lease_expired'),
            true, now(), NULL);
        n := n + 1;
    END LOOP;
    RETURN n;
END $$;
-- +goose StatementEnd

-- cairn_run_cancel cancels a run: waiting, ready and running steps become canceled
-- (running attempts canceled, their leases revoked so a late completion is fenced
-- out) and the dispatchers are told on channel cairn_cancel. Returns 'canceled',
-- 'finished' (already terminal) or 'not_found'.
-- +goose StatementBegin
CREATE FUNCTION cairn_run_cancel(p_run uuid, p_reason text)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_status text;
BEGIN
    SELECT status INTO v_status FROM runs WHERE id = p_run FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'not_found';
    END IF;
    IF v_status NOT IN ('pending', 'running') THEN
        RETURN 'finished';
    END IF;
    UPDATE attempts a SET status = 'canceled', finished_at = now(),
        error = jsonb_build_object('message', 'run canceled', 'code', 'canceled')
    FROM steps s
    WHERE s.run_id = p_run AND s.status = 'running'
      AND a.run_id = s.run_id AND a.step_key = s.key AND a.number = s.attempts AND a.status = 'running';
    UPDATE steps SET status = 'canceled', finished_at = now(),
        lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
    WHERE run_id = p_run AND status IN ('waiting', 'ready', 'running');
    UPDATE runs SET status = 'canceled', finished_at = now(), steps_remaining = 0,
        error = jsonb_build_object('message', coalesce(nullif(p_reason, ''), 'canceled'))
    WHERE id = p_run;
    PERFORM cairn_event(p_run, 'run.canceled', NULL, NULL, jsonb_build_object('reason', p_reason));
    PERFORM pg_notify('cairn_cancel', p_run::text);
    RETURN 'canceled';
END $$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION cairn_run_cancel(uuid, text);
DROP FUNCTION cairn_sweep(integer);
DROP FUNCTION cairn_steps_succeed(uuid[], text[], bigint[], text[], text[]);
DROP FUNCTION cairn_step_finish(uuid, text, bigint, text, jsonb, jsonb, boolean, timestamptz, text);
DROP FUNCTION cairn_skip_dependents(uuid, text);
DROP FUNCTION cairn_run_settle(uuid, integer);
DROP FUNCTION cairn_event(uuid, text, text, integer, jsonb);
DROP TABLE idempotency_keys;
DROP TABLE events;
DROP TABLE attempts;
DROP TABLE step_edges;
DROP TABLE steps;
DROP TABLE runs;
DROP TABLE workflow_versions;
DROP TABLE bundles;
DROP TABLE workflows;
DROP SEQUENCE lease_token_seq;
