-- +goose Up
-- Pause and resume (issue 13): a run (or every run of a workflow) is held, no new
-- attempt of it starts, running ones finish; and the retry policy's on_exhausted:
-- pause parks a step that would fail instead of failing its run.
--
-- How a run is held: steps.held, set on every unfinished step of a paused run and
-- cleared when it resumes. The claim skips held steps through its partial index
-- (steps_claim_idx, rebuilt below with NOT held), so pausing costs the claim nothing:
-- a held step is simply not in the index. A held step keeps its state (waiting,
-- ready, running): a running attempt finishes and its outcome is recorded; the
-- dependents it readies are held too, since held is set on every unfinished step.
--
-- Lock order: the functions that hold or release a run lock its steps first, then
-- the run's row, as the claim and the finishing functions do, so that they do not
-- deadlock with them.

-- runs: the state paused, and why (runs.pause_reason, set exactly while paused):
--   run       an operator paused the run (cairn_run_pause);
--   workflow  its workflow was paused (cairn_workflow_pause, or created while it was);
--             the workflow's resume releases it, not the runs paused one by one;
--   exhausted a step with on_exhausted: pause used up its attempts (cairn_step_finish).
ALTER TABLE runs DROP CONSTRAINT runs_status_check;
ALTER TABLE runs ADD CONSTRAINT runs_status_check
    CHECK (status IN ('pending', 'running', 'paused', 'succeeded', 'failed', 'canceled'));
ALTER TABLE runs ADD COLUMN pause_reason text
    CHECK (pause_reason IN ('run', 'workflow', 'exhausted'));
ALTER TABLE runs ADD CONSTRAINT runs_paused_has_reason_check
    CHECK ((status = 'paused') = (pause_reason IS NOT NULL));
DROP INDEX runs_unfinished_idx;
CREATE INDEX runs_unfinished_idx ON runs (id) WHERE status IN ('pending', 'running', 'paused');

-- steps: held (see above), and what to do when the step would fail
-- (on_exhausted: fail, or pause: park it, ready and held with a fresh attempt
-- budget, and pause the run).
ALTER TABLE steps ADD COLUMN held boolean NOT NULL DEFAULT false;
ALTER TABLE steps ADD COLUMN on_exhausted text NOT NULL DEFAULT 'fail'
    CHECK (on_exhausted IN ('fail', 'pause'));
DROP INDEX steps_claim_idx;
CREATE INDEX steps_claim_idx ON steps (ready_at) WHERE status = 'ready' AND NOT held;

-- workflow_versions: each step's on_exhausted, parallel to step_keys. Versions
-- registered before have none ('{}'): their steps fail (unnest pads with NULL,
-- which run creation reads as fail).
ALTER TABLE workflow_versions ADD COLUMN step_on_exhausted text[] NOT NULL DEFAULT '{}';
ALTER TABLE workflow_versions ADD CONSTRAINT workflow_versions_step_on_exhausted_check
    CHECK (cardinality(step_on_exhausted) IN (0, cardinality(step_keys)));

-- workflows: paused, by whom and since when. New runs of a paused workflow are
-- created paused (pause_reason workflow).
ALTER TABLE workflows ADD COLUMN paused boolean NOT NULL DEFAULT false;
ALTER TABLE workflows ADD COLUMN paused_by text;
ALTER TABLE workflows ADD COLUMN paused_at timestamptz;

-- cairn_run_hold pauses a pending or running run for p_kind (run, workflow): its
-- unfinished steps are held, the run is paused, and run.paused records the actor
-- and the operator's note. Returns false, and writes nothing, when the run is not
-- pending or running once its row is locked. The caller has checked that it exists.
-- +goose StatementBegin
CREATE FUNCTION cairn_run_hold(p_run uuid, p_kind text, p_actor text, p_note text)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_status text;
BEGIN
    -- Steps first (see the lock order above).
    UPDATE steps SET held = true
    WHERE run_id = p_run AND status IN ('waiting', 'ready', 'running') AND NOT held;
    SELECT status INTO v_status FROM runs WHERE id = p_run FOR UPDATE;
    IF v_status IS DISTINCT FROM 'pending' AND v_status IS DISTINCT FROM 'running' THEN
        -- Ended (or paused) meanwhile: the caller's transaction decides; the steps
        -- held above are then terminal or already held.
        RETURN false;
    END IF;
    UPDATE runs SET status = 'paused', pause_reason = p_kind WHERE id = p_run;
    PERFORM cairn_event(p_run, 'run.paused', NULL, NULL,
        jsonb_build_object('actor', p_actor, 'reason', coalesce(p_note, ''), 'pause_reason', p_kind));
    RETURN true;
END $$;
-- +goose StatementEnd

-- cairn_run_release resumes a paused run: its steps are released and it is running
-- again (pending if no step ever started); run.resumed records the actor, the note
-- and the pause_reason it had. Raises CAR09 when the run is not paused once its row
-- is locked, or (p_only given) is paused for another reason: the caller's
-- transaction, or its subtransaction, then undoes the steps' release.
-- +goose StatementBegin
CREATE FUNCTION cairn_run_release(p_run uuid, p_actor text, p_note text, p_only text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_status text;
    v_reason text;
BEGIN
    -- Steps first (see the lock order above).
    UPDATE steps SET held = false WHERE run_id = p_run AND held;
    SELECT status, pause_reason INTO v_status, v_reason FROM runs WHERE id = p_run FOR UPDATE;
    IF v_status IS DISTINCT FROM 'paused' OR v_reason <> coalesce(p_only, v_reason) THEN
        RAISE EXCEPTION 'run % is not paused (%): only a paused run can be resumed', p_run, v_status
            USING ERRCODE = 'CAR09';
    END IF;
    UPDATE runs SET status = CASE WHEN started_at IS NULL THEN 'pending' ELSE 'running' END,
        pause_reason = NULL
    WHERE id = p_run;
    PERFORM cairn_event(p_run, 'run.resumed', NULL, NULL,
        jsonb_build_object('actor', p_actor, 'reason', coalesce(p_note, ''), 'pause_reason', v_reason));
    PERFORM cairn_wake();
END $$;
-- +goose StatementEnd

-- cairn_run_pause pauses a run at an operator's request. A pending or running run is
-- paused (true). A paused run stays so and nothing is written (false), except that a
-- run paused by its workflow is from then on paused by the operator too (true, one
-- more run.paused): the workflow's resume no longer releases it. Raises CA404 for no
-- such run, CAR09 for a run that has ended.
-- +goose StatementBegin
CREATE FUNCTION cairn_run_pause(p_run uuid, p_actor text, p_note text)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_status text;
    v_reason text;
BEGIN
    SELECT status, pause_reason INTO v_status, v_reason FROM runs WHERE id = p_run;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'run % not found', p_run USING ERRCODE = 'CA404';
    END IF;
    IF v_status IN ('pending', 'running') THEN
        IF cairn_run_hold(p_run, 'run', p_actor, p_note) THEN
            RETURN true;
        END IF;
        -- It changed meanwhile: look again under the lock cairn_run_hold took.
        SELECT status, pause_reason INTO v_status, v_reason FROM runs WHERE id = p_run;
    END IF;
    IF v_status = 'paused' THEN
        IF v_reason <> 'workflow' THEN
            RETURN false;
        END IF;
        UPDATE runs SET pause_reason = 'run' WHERE id = p_run;
        PERFORM cairn_event(p_run, 'run.paused', NULL, NULL,
            jsonb_build_object('actor', p_actor, 'reason', coalesce(p_note, ''), 'pause_reason', 'run'));
        RETURN true;
    END IF;
    RAISE EXCEPTION 'run % has ended (%): only a pending or running run can be paused', p_run, v_status
        USING ERRCODE = 'CAR09';
END $$;
-- +goose StatementEnd

-- cairn_run_resume releases a paused run, whatever paused it. Raises CA404 for no
-- such run, CAR09 for a run that is not paused.
-- +goose StatementBegin
CREATE FUNCTION cairn_run_resume(p_run uuid, p_actor text, p_note text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM runs WHERE id = p_run;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'run % not found', p_run USING ERRCODE = 'CA404';
    END IF;
    PERFORM cairn_run_release(p_run, p_actor, p_note, NULL);
END $$;
-- +goose StatementEnd

-- cairn_workflow_pause pauses a workflow: it is marked paused (by p_actor, now; a
-- workflow paused already keeps who and when), every pending or running run of it
-- is paused (pause_reason workflow), and runs created from now on start paused.
-- Returns how many runs it paused. Raises CA404 for no such workflow.
--
-- The workflow's row is locked FOR UPDATE first: run creation reads paused FOR KEY
-- SHARE (sqlRunCreate), so a run being created either commits before this scan
-- (which then pauses it) or reads paused = true.
-- +goose StatementBegin
CREATE FUNCTION cairn_workflow_pause(p_name text, p_actor text, p_note text)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_id uuid;
    n    integer := 0;
BEGIN
    PERFORM 1 FROM workflows WHERE name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'workflow % not found', p_name USING ERRCODE = 'CA404';
    END IF;
    UPDATE workflows SET paused = true, paused_by = coalesce(paused_by, p_actor),
        paused_at = coalesce(paused_at, now())
    WHERE name = p_name;
    FOR v_id IN
        SELECT id FROM runs WHERE workflow = p_name AND status IN ('pending', 'running') ORDER BY id
    LOOP
        n := n + cairn_run_hold(v_id, 'workflow', p_actor, p_note)::integer;
    END LOOP;
    RETURN n;
END $$;
-- +goose StatementEnd

-- cairn_workflow_resume resumes a workflow: it is no longer paused, and the runs its
-- pause held (pause_reason workflow) are released; runs paused one by one, or parked
-- by on_exhausted, stay paused. Resuming a workflow that is not paused changes
-- nothing. Returns how many runs it released. Raises CA404 for no such workflow.
-- +goose StatementBegin
CREATE FUNCTION cairn_workflow_resume(p_name text, p_actor text, p_note text)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_id uuid;
    n    integer := 0;
BEGIN
    PERFORM 1 FROM workflows WHERE name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'workflow % not found', p_name USING ERRCODE = 'CA404';
    END IF;
    UPDATE workflows SET paused = false, paused_by = NULL, paused_at = NULL
    WHERE name = p_name AND paused;
    FOR v_id IN
        SELECT id FROM runs WHERE workflow = p_name AND status = 'paused' AND pause_reason = 'workflow' ORDER BY id
    LOOP
        -- A run resumed, canceled or paused by an operator since the scan is left
        -- as it is (the subtransaction undoes what the release did).
        BEGIN
            PERFORM cairn_run_release(v_id, p_actor, p_note, 'workflow');
            n := n + 1;
        EXCEPTION WHEN SQLSTATE 'CAR09' THEN
            NULL;
        END;
    END LOOP;
    RETURN n;
END $$;
-- +goose StatementEnd

-- cairn_run_settle: as in 00001, and a paused run ends too when its last steps
-- finish (its pause_reason cleared, and its steps' held flags, so that a retry of
-- the run does not find them held).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_run_settle(p_run uuid, p_done integer)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_remaining integer;
    v_paused    boolean;
    v_failed    record;
BEGIN
    UPDATE runs SET steps_remaining = greatest(steps_remaining - p_done, 0)
    WHERE id = p_run AND status IN ('pending', 'running', 'paused')
    RETURNING steps_remaining, status = 'paused' INTO v_remaining, v_paused;
    IF v_remaining IS DISTINCT FROM 0 THEN
        RETURN;
    END IF;
    IF v_paused THEN
        UPDATE steps SET held = false WHERE run_id = p_run AND held;
    END IF;
    SELECT key, last_error INTO v_failed FROM steps
    WHERE run_id = p_run AND status = 'failed'
    ORDER BY finished_at, key LIMIT 1;
    IF FOUND THEN
        UPDATE runs SET status = 'failed', finished_at = now(), pause_reason = NULL,
            error = jsonb_build_object('message', 'step ' || v_failed.key || ' failed',
                                       'step', v_failed.key, 'cause', v_failed.last_error)
        WHERE id = p_run;
        PERFORM cairn_event(p_run, 'run.failed', NULL, NULL, jsonb_build_object('step', v_failed.key));
    ELSE
        UPDATE runs SET status = 'succeeded', finished_at = now(), pause_reason = NULL WHERE id = p_run;
        PERFORM cairn_event(p_run, 'run.succeeded', NULL, NULL, '{}');
    END IF;
END $$;
-- +goose StatementEnd

-- cairn_run_cancel: as in 00003, and a paused run can be canceled too (its steps
-- are released: held is cleared with their cancel).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_run_cancel(p_run uuid, p_reason text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_status text;
BEGIN
    SELECT status INTO v_status FROM runs WHERE id = p_run FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'run % not found', p_run USING ERRCODE = 'CA404';
    END IF;
    IF v_status NOT IN ('pending', 'running', 'paused') THEN
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
    UPDATE steps SET held = false WHERE run_id = p_run AND held;
    UPDATE runs SET status = 'canceled', finished_at = now(), steps_remaining = 0, pause_reason = NULL,
        error = jsonb_build_object('message', coalesce(nullif(p_reason, ''), 'canceled'))
    WHERE id = p_run;
    PERFORM cairn_event(p_run, 'run.canceled', NULL, NULL, jsonb_build_object('reason', p_reason));
    PERFORM pg_notify('cairn_cancel', p_run::text);
END $$;
-- +goose StatementEnd

-- cairn_step_finish: as in 00003, with the step's on_exhausted. An outcome that
-- would fail a step whose on_exhausted is pause (its counted attempts used up, or a
-- failure not retryable) parks it instead: the attempt is recorded as it ended, the
-- step is ready at once with a fresh attempt budget (counted_attempts 0) and its
-- last error, and held; the run's other unfinished steps are held too and the run
-- is paused (pause_reason exhausted, whatever paused it before), with a run.paused
-- event naming the step, its attempt and its error. An operator resumes the run
-- (the step runs again) or cancels it.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_step_finish(p_run uuid, p_key text, p_token bigint, p_outcome text,
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
        WHERE run_id = p_run AND status IN ('waiting', 'ready', 'running') AND NOT held;
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
END $$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION cairn_workflow_resume(text, text, text);
DROP FUNCTION cairn_workflow_pause(text, text, text);
DROP FUNCTION cairn_run_resume(uuid, text, text);
DROP FUNCTION cairn_run_pause(uuid, text, text);
DROP FUNCTION cairn_run_release(uuid, text, text, text);
DROP FUNCTION cairn_run_hold(uuid, text, text, text);

-- The functions as 00003 (cairn_step_finish, cairn_run_cancel) and 00001
-- (cairn_run_settle) left them.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_step_finish(p_run uuid, p_key text, p_token bigint, p_outcome text,
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

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_run_cancel(p_run uuid, p_reason text)
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

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_run_settle(p_run uuid, p_done integer)
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

-- Paused runs go back to where they were before the pause; held steps are released.
UPDATE runs SET status = CASE WHEN started_at IS NULL THEN 'pending' ELSE 'running' END
WHERE status = 'paused';
ALTER TABLE workflows DROP COLUMN paused_at;
ALTER TABLE workflows DROP COLUMN paused_by;
ALTER TABLE workflows DROP COLUMN paused;
ALTER TABLE workflow_versions DROP CONSTRAINT workflow_versions_step_on_exhausted_check;
ALTER TABLE workflow_versions DROP COLUMN step_on_exhausted;
DROP INDEX steps_claim_idx;
ALTER TABLE steps DROP COLUMN on_exhausted;
ALTER TABLE steps DROP COLUMN held;
CREATE INDEX steps_claim_idx ON steps (ready_at) WHERE status = 'ready';
DROP INDEX runs_unfinished_idx;
CREATE INDEX runs_unfinished_idx ON runs (id) WHERE status IN ('pending', 'running');
ALTER TABLE runs DROP CONSTRAINT runs_paused_has_reason_check;
ALTER TABLE runs DROP COLUMN pause_reason;
ALTER TABLE runs DROP CONSTRAINT runs_status_check;
ALTER TABLE runs ADD CONSTRAINT runs_status_check
    CHECK (status IN ('pending', 'running', 'succeeded', 'failed', 'canceled'));
