-- +goose Up
-- The state machine, written once (issue 12):
--   - cairn_wake() is the one place in SQL that names the channel dispatchers listen
--     on (catalog.ChannelSteps in Go);
--   - cairn_step_finish decides the step's next state once, then writes; it returns
--     a boolean (written, or false: lease lost) and takes only the outcomes that are
--     not successes (successes go through cairn_steps_succeed);
--   - cairn_run_cancel returns nothing and raises CA404 (no such run) or CA409 (run
--     already finished), which catalog.translateError maps.
-- Cairn's own SQLSTATEs are of class CA: CA400 an outcome the function does not
-- take, CA404 not found, CA409 the run has already ended.

-- cairn_wake wakes idle dispatchers: steps may have become ready. A hint (they poll
-- too); notifications of one transaction with the same payload are sent once.
-- +goose StatementBegin
CREATE FUNCTION cairn_wake()
RETURNS void LANGUAGE sql AS $$
    SELECT pg_notify('cairn_steps', '');
$$;
-- +goose StatementEnd

-- cairn_step_finish records the end of an attempt that did not succeed, fenced by
-- its lease token, and what follows from it. p_outcome:
--   - failed, timed_out, interrupted: the attempt counts against max_attempts. With
--     p_retryable and counted attempts left, the step is ready again at p_retry_at
--     (step.retrying); otherwise it fails and its dependents are skipped
--     (step.failed, step.skipped), which may end the run.
--   - handback: a lease handed back at shutdown: the attempt is interrupted and does
--     not count; the step is ready at once (step.handed_back).
--   - infra_failed: Cairn's own infrastructure failed, not the handler: the attempt
--     is failed and does not count; the step is ready at p_retry_at (step.retrying).
-- The claim counted the attempt already (steps.counted_attempts); an attempt that
-- does not count takes it back here.
-- Returns true when written, false when the token is not the step's current lease
-- (nothing is written then). Any other outcome, succeeded included, raises CA400.
-- p_output is not read: the argument stays so that the signature (and cairn_sweep's
-- call) does not change. The return type does, hence DROP and CREATE.
DROP FUNCTION cairn_step_finish(uuid, text, bigint, text, jsonb, jsonb, boolean, timestamptz, text);
-- +goose StatementBegin
CREATE FUNCTION cairn_step_finish(p_run uuid, p_key text, p_token bigint, p_outcome text,
                                  p_output jsonb, p_error jsonb, p_retryable boolean,
                                  p_retry_at timestamptz, p_log_key text)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    -- The attempt does not use up one of max_attempts.
    v_free     boolean := p_outcome IN ('handback', 'infra_failed');
    v_attempt_status text := CASE p_outcome WHEN 'handback' THEN 'interrupted'
                                            WHEN 'infra_failed' THEN 'failed'
                                            ELSE p_outcome END;
    v_ready_at timestamptz := CASE WHEN p_outcome = 'handback' THEN now()
                                   ELSE greatest(coalesce(p_retry_at, now()), now()) END;
    v_next     text;     -- the step's next status: ready or failed
    v_attempt  integer;
    v_type     text;
    v_data     jsonb;
    v_rev      bigint;
BEGIN
    IF p_outcome IS NULL OR p_outcome NOT IN ('failed', 'timed_out', 'interrupted', 'handback', 'infra_failed') THEN
        RAISE EXCEPTION 'cairn_step_finish: outcome % is not one it takes (successes go through cairn_steps_succeed)', p_outcome
            USING ERRCODE = 'CA400';
    END IF;

    -- The decision, once, from the row's current values under its lock.
    SELECT CASE WHEN v_free OR (p_retryable AND counted_attempts < max_attempts) THEN 'ready'
                ELSE 'failed' END,
           attempts
      INTO v_next, v_attempt
      FROM steps
     WHERE run_id = p_run AND key = p_key AND lease_token = p_token AND status = 'running'
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false; -- lease lost
    END IF;

    UPDATE steps SET
        status           = v_next,
        last_error       = CASE WHEN p_outcome = 'handback' THEN last_error ELSE p_error END,
        counted_attempts = counted_attempts - v_free::integer,
        ready_at         = CASE WHEN v_next = 'ready' THEN v_ready_at ELSE ready_at END,
        finished_at      = CASE WHEN v_next = 'failed' THEN now() ELSE finished_at END,
        lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
    WHERE run_id = p_run AND key = p_key;

    UPDATE attempts SET status = v_attempt_status, finished_at = now(), error = p_error,
        log_key = p_log_key, counted = NOT v_free
    WHERE run_id = p_run AND step_key = p_key AND number = v_attempt;

    IF v_next = 'failed' THEN
        v_type := 'step.failed';
        v_data := jsonb_build_object('attempt_status', v_attempt_status, 'error', p_error);
    ELSIF p_outcome = 'handback' THEN
        v_type := 'step.handed_back';
        v_data := '{}'::jsonb;
    ELSE
        v_type := 'step.retrying';
        v_data := jsonb_build_object('attempt_status', v_attempt_status, 'error', p_error,
                                     'ready_at', v_ready_at, 'counted', NOT v_free);
    END IF;

    -- One update of the run: its revision (the event's seq) and, for a failed step,
    -- the count of steps left.
    UPDATE runs SET revision = revision + 1,
        steps_remaining = greatest(steps_remaining - (v_next = 'failed')::integer, 0)
    WHERE id = p_run
    RETURNING revision INTO v_rev;
    INSERT INTO events (run_id, seq, type, step_key, attempt, data)
    VALUES (p_run, v_rev, v_type, p_key, v_attempt, v_data);

    IF v_next = 'failed' THEN
        -- Skip the dependents, count them as done too, maybe end the run.
        PERFORM cairn_run_settle(p_run, cairn_skip_dependents(p_run, p_key));
    ELSE
        PERFORM cairn_wake();
    END IF;
    RETURN true;
END $$;
-- +goose StatementEnd

-- cairn_steps_succeed: as in 00001, waking the dispatchers through cairn_wake.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_steps_succeed(p_runs uuid[], p_keys text[], p_tokens bigint[],
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
        PERFORM cairn_wake();
    END IF;
    RETURN v_ords;
END $$;
-- +goose StatementEnd

-- cairn_run_cancel cancels a run: waiting, ready and running steps become canceled
-- (running attempts canceled, their leases revoked so a late completion is fenced
-- out) and the dispatchers are told on channel cairn_cancel. It raises CA404 when
-- there is no such run and CA409 when the run has already ended. (It returned text
-- before, hence DROP and CREATE.)
DROP FUNCTION cairn_run_cancel(uuid, text);
-- +goose StatementBegin
CREATE FUNCTION cairn_run_cancel(p_run uuid, p_reason text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_status text;
BEGIN
    SELECT status INTO v_status FROM runs WHERE id = p_run FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'run % not found', p_run USING ERRCODE = 'CA404';
    END IF;
    IF v_status NOT IN ('pending', 'running') THEN
        RAISE EXCEPTION 'run % has already ended: %', p_run, v_status USING ERRCODE = 'CA409';
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
END $$;
-- +goose StatementEnd

-- +goose Down
-- The functions of 00001, as they were.
DROP FUNCTION cairn_run_cancel(uuid, text);
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

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_steps_succeed(p_runs uuid[], p_keys text[], p_tokens bigint[],
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

DROP FUNCTION cairn_step_finish(uuid, text, bigint, text, jsonb, jsonb, boolean, timestamptz, text);
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

DROP FUNCTION cairn_wake();
