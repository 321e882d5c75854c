-- +goose Up
-- A crash never fails a run. An attempt whose dispatcher died (its lease expired
-- and the sweep took it back, outcome 'interrupted', code lease_expired) no
-- longer uses up one of the step's max_attempts: like a lease handed back at
-- shutdown, it is given back. Interruptions are bounded on their own instead:
-- when the step has been interrupted max_interruptions times in a row (its
-- retry policy's, default 5), the interruption that reaches the bound fails the
-- step (or parks it, with on_exhausted: pause) with code interrupted_too_often,
-- so that a handler that kills its dispatcher every time (out of memory, a
-- poison pill) stops taking servers down. "In a row" counts the step's
-- interrupted attempts after the newest one that ended otherwise and counted
-- (succeeded, failed, timed out), and after the newest interrupted_too_often:
-- a run retried or a step resumed after that failure gets a fresh bound.
--
-- Leases of a live dispatcher are not swept for a lease TTL past their expiry
-- (cairn_sweep below): a dispatcher's heartbeat now also renews its own
-- liveness (dispatchers.lease_until), and skips the step rows other
-- transactions hold locked instead of waiting for them (catalog's
-- sqlHeartbeat), so a lease whose row was busy at every renewal of a whole TTL
-- is not taken from a dispatcher that is still renewing.
ALTER TABLE dispatchers ADD COLUMN lease_until timestamptz;

-- cairn_step_max_interruptions is the max_interruptions of step p_key of run
-- p_run: its retry policy's, read from the run's version's definition (a map
-- instance's is its map step's, p_map_parent), 5 when unset
-- (bundle.DefaultMaxInterruptions; catalog TestMaxInterruptionsDefault holds
-- the two equal). Only an interruption reads it.
-- +goose StatementBegin
CREATE FUNCTION cairn_step_max_interruptions(p_run uuid, p_key text, p_map_parent text)
RETURNS integer LANGUAGE sql STABLE AS $$
    SELECT coalesce((
        SELECT (x.d->'retry'->>'max_interruptions')::integer
        FROM runs r
        JOIN workflow_versions v ON v.workflow = r.workflow AND v.version = r.version
        CROSS JOIN LATERAL (
            SELECT s FROM jsonb_array_elements(v.definition->'steps') s
            UNION ALL
            SELECT s->'compensate' FROM jsonb_array_elements(v.definition->'steps') s WHERE s ? 'compensate'
            UNION ALL
            SELECT s FROM jsonb_array_elements(coalesce(v.definition->'on_failure', '[]'::jsonb)) s
        ) x(d)
        WHERE r.id = p_run AND x.d->>'key' = coalesce(p_map_parent, p_key)
        LIMIT 1), 5)
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_step_finish(p_run uuid, p_key text, p_token bigint, p_outcome text,
    p_output jsonb, p_error jsonb, p_retryable boolean, p_retry_at timestamptz, p_log_key text)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    -- The attempt does not use up one of max_attempts.
    v_free     boolean := p_outcome IN ('handback', 'infra_failed', 'interrupted');
    v_attempt_status text := CASE p_outcome WHEN 'handback' THEN 'interrupted'
                                            WHEN 'infra_failed' THEN 'failed'
                                            ELSE p_outcome END;
    v_ready_at timestamptz := CASE WHEN p_outcome = 'handback' THEN now()
                                   ELSE greatest(coalesce(p_retry_at, now()), now()) END;
    v_error    jsonb := p_error;
    v_next     text;     -- the step's next status: ready, failed, or parked (ready and held)
    v_attempt  integer;
    v_counted  integer;
    v_max      integer;
    v_exhausted text;
    v_parent   text;
    v_in_row   integer;
    v_bound    integer;
    v_type     text;
    v_data     jsonb;
    v_rev      bigint;
BEGIN
    IF p_outcome IS NULL OR p_outcome NOT IN ('failed', 'timed_out', 'interrupted', 'handback', 'infra_failed') THEN
        RAISE EXCEPTION 'cairn_step_finish: outcome % is not one it takes (successes go through cairn_steps_succeed)', p_outcome
            USING ERRCODE = 'CA400';
    END IF;

    -- The row's current values, under its lock.
    SELECT attempts, counted_attempts, max_attempts, on_exhausted, map_parent
      INTO v_attempt, v_counted, v_max, v_exhausted, v_parent
      FROM steps
     WHERE run_id = p_run AND key = p_key AND lease_token = p_token AND status = 'running'
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false; -- lease lost
    END IF;

    -- The decision, once.
    v_next := CASE WHEN v_free OR (p_retryable AND v_counted < v_max) THEN 'ready'
                   WHEN v_exhausted = 'pause' THEN 'parked'
                   ELSE 'failed' END;
    IF p_outcome = 'interrupted' THEN
        SELECT count(*) + 1 INTO v_in_row FROM attempts a
        WHERE a.run_id = p_run AND a.step_key = p_key AND a.number < v_attempt
          AND a.status = 'interrupted' AND a.error->>'code' = 'lease_expired'
          AND a.number > coalesce((
                SELECT max(b.number) FROM attempts b
                WHERE b.run_id = p_run AND b.step_key = p_key AND b.number < v_attempt
                  AND ((b.counted AND b.status IN ('succeeded', 'failed', 'timed_out'))
                       OR b.error->>'code' = 'interrupted_too_often')), 0);
        v_bound := cairn_step_max_interruptions(p_run, p_key, v_parent);
        IF v_in_row >= v_bound THEN
            v_next := CASE WHEN v_exhausted = 'pause' THEN 'parked' ELSE 'failed' END;
            v_error := jsonb_build_object(
                'message', format('interrupted %s times in a row: the dispatcher running the step stopped (killed, out of memory, its machine lost) during each of its last %s attempts; max_interruptions is %s',
                                  v_in_row, v_in_row, v_bound),
                'code', 'interrupted_too_often', 'retryable', false,
                'interruptions', v_in_row, 'last', p_error);
        END IF;
    END IF;

    UPDATE steps SET
        status           = CASE WHEN v_next = 'failed' THEN 'failed' ELSE 'ready' END,
        last_error       = CASE WHEN p_outcome = 'handback' THEN last_error ELSE v_error END,
        counted_attempts = CASE WHEN v_next = 'parked' THEN 0 ELSE counted_attempts - v_free::integer END,
        ready_at         = CASE v_next WHEN 'ready' THEN v_ready_at WHEN 'parked' THEN now() ELSE ready_at END,
        finished_at      = CASE WHEN v_next = 'failed' THEN now() ELSE finished_at END,
        held             = held OR v_next = 'parked',
        lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
    WHERE run_id = p_run AND key = p_key;

    UPDATE attempts SET status = v_attempt_status, finished_at = now(), error = v_error,
        log_key = p_log_key, counted = NOT v_free
    WHERE run_id = p_run AND step_key = p_key AND number = v_attempt;

    IF v_next = 'failed' THEN
        v_type := 'step.failed';
        v_data := jsonb_build_object('attempt_status', v_attempt_status, 'error', v_error);
    ELSIF v_next = 'parked' THEN
        -- The run is paused: hold its other unfinished steps (this step's lock is
        -- held already; the run's row comes after the steps).
        UPDATE steps SET held = true
        WHERE run_id = p_run AND status IN ('waiting', 'ready', 'running', 'suspended') AND NOT held;
        v_type := 'run.paused';
        v_data := jsonb_build_object('pause_reason', 'exhausted', 'step', p_key,
                                     'attempt_status', v_attempt_status, 'error', v_error);
    ELSIF p_outcome = 'handback' THEN
        v_type := 'step.handed_back';
        v_data := '{}'::jsonb;
    ELSE
        v_type := 'step.retrying';
        v_data := jsonb_build_object('attempt_status', v_attempt_status, 'error', v_error,
                                     'ready_at', v_ready_at, 'counted', NOT v_free);
    END IF;

    -- One update of the run: its revision (the event's seq), for a failed step the
    -- count of steps left, for a parked one its pause.
    UPDATE runs SET revision = revision + 1,
        steps_remaining = greatest(steps_remaining - (v_next = 'failed')::integer, 0),
        status = CASE WHEN v_next = 'parked' THEN 'paused' ELSE status END,
        pause_reason = CASE WHEN v_next = 'parked' THEN 'exhausted' ELSE pause_reason END
    WHERE id = p_run
    RETURNING revision INTO v_rev;
    INSERT INTO events (run_id, seq, type, step_key, attempt, data)
    VALUES (p_run, v_rev, v_type, p_key, v_attempt, v_data);

    IF v_next = 'failed' THEN
        -- Skip the dependents, count them as done too, maybe end the run.
        PERFORM cairn_run_settle(p_run, cairn_skip_dependents(p_run, p_key));
    ELSIF v_next = 'ready' THEN
        PERFORM cairn_wake();
    END IF;
    RETURN true;
END $$;
-- +goose StatementEnd

-- cairn_sweep returns expired leases (see 00002 for the grace after the
-- database's start). A lease whose owner renewed its liveness within the last
-- lease TTL (dispatchers.lease_until still ahead) is left to it until it is
-- p_grace past its expiry: its row was locked by other transactions at the
-- owner's renewals (the heartbeat skips locked rows), or the owner no longer
-- holds it (a lease a live dispatcher forgot is still swept, later).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_sweep(p_limit integer, p_grace interval)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    r record;
    n integer := 0;
BEGIN
    IF now() < pg_postmaster_start_time() + p_grace THEN
        RETURN 0;
    END IF;
    FOR r IN
        SELECT s.run_id, s.key, s.lease_token FROM steps s
        WHERE s.status = 'running' AND s.lease_expires_at < now()
          AND (s.lease_expires_at < now() - p_grace
               OR NOT EXISTS (SELECT 1 FROM dispatchers d
                              WHERE d.id = s.lease_owner AND d.lease_until > now()))
        ORDER BY s.lease_expires_at
        LIMIT p_limit
        FOR UPDATE OF s SKIP LOCKED
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

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_sweep(p_limit integer, p_grace interval)
 RETURNS integer
 LANGUAGE plpgsql
AS $$
DECLARE
    r record;
    n integer := 0;
BEGIN
    IF now() < pg_postmaster_start_time() + p_grace THEN
        RETURN 0;
    END IF;
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
END $$

;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_step_finish(p_run uuid, p_key text, p_token bigint, p_outcome text, p_output jsonb, p_error jsonb, p_retryable boolean, p_retry_at timestamp with time zone, p_log_key text)
 RETURNS boolean
 LANGUAGE plpgsql
AS $$
DECLARE
    -- The attempt does not use up one of max_attempts.
    v_free     boolean := p_outcome IN ('handback', 'infra_failed');
    v_attempt_status text := CASE p_outcome WHEN 'handback' THEN 'interrupted'
                                            WHEN 'infra_failed' THEN 'failed'
                                            ELSE p_outcome END;
    v_ready_at timestamptz := CASE WHEN p_outcome = 'handback' THEN now()
                                   ELSE greatest(coalesce(p_retry_at, now()), now()) END;
    v_next     text;     -- the step's next status: ready, failed, or parked (ready and held)
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
                WHEN on_exhausted = 'pause' THEN 'parked'
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
        status           = CASE WHEN v_next = 'failed' THEN 'failed' ELSE 'ready' END,
        last_error       = CASE WHEN p_outcome = 'handback' THEN last_error ELSE p_error END,
        counted_attempts = CASE WHEN v_next = 'parked' THEN 0 ELSE counted_attempts - v_free::integer END,
        ready_at         = CASE v_next WHEN 'ready' THEN v_ready_at WHEN 'parked' THEN now() ELSE ready_at END,
        finished_at      = CASE WHEN v_next = 'failed' THEN now() ELSE finished_at END,
        held             = held OR v_next = 'parked',
        lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
    WHERE run_id = p_run AND key = p_key;

    UPDATE attempts SET status = v_attempt_status, finished_at = now(), error = p_error,
        log_key = p_log_key, counted = NOT v_free
    WHERE run_id = p_run AND step_key = p_key AND number = v_attempt;

    IF v_next = 'failed' THEN
        v_type := 'step.failed';
        v_data := jsonb_build_object('attempt_status', v_attempt_status, 'error', p_error);
    ELSIF v_next = 'parked' THEN
        -- The run is paused: hold its other unfinished steps (this step's lock is
        -- held already; the run's row comes after the steps).
        UPDATE steps SET held = true
        WHERE run_id = p_run AND status IN ('waiting', 'ready', 'running', 'suspended') AND NOT held;
        v_type := 'run.paused';
        v_data := jsonb_build_object('pause_reason', 'exhausted', 'step', p_key,
                                     'attempt_status', v_attempt_status, 'error', p_error);
    ELSIF p_outcome = 'handback' THEN
        v_type := 'step.handed_back';
        v_data := '{}'::jsonb;
    ELSE
        v_type := 'step.retrying';
        v_data := jsonb_build_object('attempt_status', v_attempt_status, 'error', p_error,
                                     'ready_at', v_ready_at, 'counted', NOT v_free);
    END IF;

    -- One update of the run: its revision (the event's seq), for a failed step the
    -- count of steps left, for a parked one its pause.
    UPDATE runs SET revision = revision + 1,
        steps_remaining = greatest(steps_remaining - (v_next = 'failed')::integer, 0),
        status = CASE WHEN v_next = 'parked' THEN 'paused' ELSE status END,
        pause_reason = CASE WHEN v_next = 'parked' THEN 'exhausted' ELSE pause_reason END
    WHERE id = p_run
    RETURNING revision INTO v_rev;
    INSERT INTO events (run_id, seq, type, step_key, attempt, data)
    VALUES (p_run, v_rev, v_type, p_key, v_attempt, v_data);

    IF v_next = 'failed' THEN
        -- Skip the dependents, count them as done too, maybe end the run.
        PERFORM cairn_run_settle(p_run, cairn_skip_dependents(p_run, p_key));
    ELSIF v_next = 'ready' THEN
        PERFORM cairn_wake();
    END IF;
    RETURN true;
END $$

;
-- +goose StatementEnd

DROP FUNCTION cairn_step_max_interruptions(uuid, text, text);
ALTER TABLE dispatchers DROP COLUMN lease_until;
