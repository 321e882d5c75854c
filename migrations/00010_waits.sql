-- +goose Up
-- Durable waits (issue 14): a step may be suspended, waiting for a time (sleep), a
-- signal, an approval or a callback. A suspended step holds no lease and no
-- dispatcher slot: it is a row, woken by the SQL below (a sweeper every dispatcher
-- runs, or a signal, approval or callback arriving), never by a timer in memory, so
-- waits survive any restart and cost nothing while they last.
--
-- The functions, one home each (the approvals and callbacks build on them):
--   cairn_step_suspend(run, key, lease_token, kind, until, name, timeout_at, on_timeout)
--       a running step, fenced by its lease token, gives up its lease and waits.
--   cairn_step_resolve(run, key, outcome, output, error [, reason])
--       a suspended step ends: succeeded (with output) or failed (terminal). Raises
--       CAR09 when the step is not suspended (a late or repeated completion).
--   cairn_wake_due(limit)
--       the sweeper: ends due sleeps and applies due timeouts, SKIP LOCKED.
--   cairn_signal_send(run, name, payload, idempotency_key, actor)
--       delivers a signal to the step waiting for it, or buffers it, in order.
--
-- Lock order, as everywhere: steps, then the run's row.

-- steps: the state suspended, and the wait (kept after the step resumes, for its
-- history; meaningful while suspended):
--   wait_kind      sleep, signal, approval or callback;
--   wait_until     a sleep's end;
--   wait_name      a signal's name;
--   waiting_since  when the step suspended;
--   timeout_at     when a wait other than a sleep gives up (NULL: never);
--   on_timeout     fail (the step fails, code timeout) or continue (it succeeds
--                  with a null output).
ALTER TABLE steps DROP CONSTRAINT steps_status_check;
ALTER TABLE steps ADD CONSTRAINT steps_status_check
    CHECK (status IN ('waiting', 'ready', 'running', 'suspended', 'succeeded', 'failed', 'canceled', 'skipped'));
ALTER TABLE steps ADD COLUMN wait_kind text
    CHECK (wait_kind IN ('sleep', 'signal', 'approval', 'callback'));
ALTER TABLE steps ADD COLUMN wait_until timestamptz;
ALTER TABLE steps ADD COLUMN wait_name text;
ALTER TABLE steps ADD COLUMN waiting_since timestamptz;
ALTER TABLE steps ADD COLUMN timeout_at timestamptz;
ALTER TABLE steps ADD COLUMN on_timeout text
    CHECK (on_timeout IN ('fail', 'continue'));
ALTER TABLE steps ADD CONSTRAINT steps_suspended_wait_check
    CHECK (status <> 'suspended' OR (wait_kind IS NOT NULL AND waiting_since IS NOT NULL AND on_timeout IS NOT NULL
                                     AND (wait_kind <> 'sleep' OR wait_until IS NOT NULL)
                                     AND (wait_kind <> 'signal' OR wait_name IS NOT NULL)));
-- The sweeper's queue: suspended steps that are not held, by when they are due (a
-- sleep's end or a timeout, whichever comes first; NULL, never: not in the scan).
CREATE INDEX steps_wake_idx ON steps ((least(wait_until, timeout_at)))
    WHERE status = 'suspended' AND NOT held;
-- Signal steps waiting, by run and name (a signal finds its step).
CREATE INDEX steps_signal_wait_idx ON steps (run_id, wait_name)
    WHERE status = 'suspended' AND wait_kind = 'signal';

-- signals: what POST /v1/runs/{id}/signals/{name} delivered, in order (seq). A signal
-- no step waits for yet is buffered (consumed_by NULL); a signal step takes the oldest
-- buffered one of its name when it suspends, or the next to arrive while it waits.
-- payload is the JSON body or a {"$blob": …} reference. A repeat of an
-- idempotency_key (per run and name) is the same signal.
CREATE TABLE signals (
    seq             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id          uuid        NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    name            text        NOT NULL CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'),
    payload         jsonb       NOT NULL,
    idempotency_key text        CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    actor           text        NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    consumed_by     text,
    consumed_at     timestamptz,
    CHECK ((consumed_by IS NULL) = (consumed_at IS NULL)),
    UNIQUE (run_id, name, idempotency_key)
);
CREATE INDEX signals_buffered_idx ON signals (run_id, name, seq) WHERE consumed_by IS NULL;

-- cairn_step_resolve ends a suspended step: p_outcome succeeded (output p_output;
-- its dependents whose needs are all met become ready) or failed (terminal whatever
-- its retry policy: last_error p_error; its dependents are skipped). Events:
-- step.resumed {kind, outcome, reason} then step.succeeded or step.failed; the run
-- may end. p_reason says why (sleep_done, signal, timeout, approved, …).
-- Raises CA404 for no such step, CAR09 when the step is not suspended (a late or
-- repeated completion; nothing is written), CA400 for another outcome.
-- +goose StatementBegin
CREATE FUNCTION cairn_step_resolve(p_run uuid, p_key text, p_outcome text, p_output jsonb, p_error jsonb,
                                   p_reason text DEFAULT NULL)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_status  text;
    v_kind    text;
    v_attempt integer;
    v_ready   integer := 0;
    v_skipped integer := 0;
BEGIN
    IF p_outcome IS NULL OR p_outcome NOT IN ('succeeded', 'failed') THEN
        RAISE EXCEPTION 'cairn_step_resolve: outcome % is not succeeded or failed', p_outcome
            USING ERRCODE = 'CA400';
    END IF;
    SELECT status, wait_kind, attempts INTO v_status, v_kind, v_attempt
      FROM steps WHERE run_id = p_run AND key = p_key FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'step % of run % not found', p_key, p_run USING ERRCODE = 'CA404';
    END IF;
    IF v_status <> 'suspended' THEN
        RAISE EXCEPTION 'step % of run % is %, not waiting', p_key, p_run, v_status USING ERRCODE = 'CAR09';
    END IF;

    UPDATE steps SET status = p_outcome, finished_at = now(),
        output     = CASE WHEN p_outcome = 'succeeded' THEN p_output ELSE output END,
        last_error = CASE WHEN p_outcome = 'failed' THEN p_error ELSE last_error END
    WHERE run_id = p_run AND key = p_key;

    IF p_outcome = 'succeeded' THEN
        -- Its dependents (step rows, before the run's).
        WITH deps AS (
            UPDATE steps s SET deps_remaining = s.deps_remaining - 1,
                status   = CASE WHEN s.deps_remaining = 1 THEN 'ready' ELSE s.status END,
                ready_at = CASE WHEN s.deps_remaining = 1 THEN now() ELSE s.ready_at END
            FROM step_edges e
            WHERE e.run_id = p_run AND e.from_key = p_key
              AND s.run_id = p_run AND s.key = e.to_key AND s.status = 'waiting'
            RETURNING s.status
        )
        SELECT count(*) FILTER (WHERE status = 'ready') INTO v_ready FROM deps;
        PERFORM cairn_event(p_run, 'step.resumed', p_key, v_attempt,
            jsonb_build_object('kind', v_kind, 'outcome', p_outcome, 'reason', p_reason));
        PERFORM cairn_event(p_run, 'step.succeeded', p_key, v_attempt,
            CASE WHEN jsonb_typeof(p_output) = 'object' AND p_output ? '$blob'
                 THEN jsonb_build_object('output', p_output) ELSE '{}'::jsonb END);
        PERFORM cairn_run_settle(p_run, 1);
        IF v_ready > 0 THEN
            PERFORM cairn_wake();
        END IF;
    ELSE
        v_skipped := cairn_skip_dependents(p_run, p_key);
        PERFORM cairn_event(p_run, 'step.resumed', p_key, v_attempt,
            jsonb_build_object('kind', v_kind, 'outcome', p_outcome, 'reason', p_reason));
        PERFORM cairn_event(p_run, 'step.failed', p_key, v_attempt,
            jsonb_build_object('error', p_error));
        PERFORM cairn_run_settle(p_run, 1 + v_skipped);
    END IF;
END $$;
-- +goose StatementEnd

-- cairn_step_wake ends the wait of a suspended step that is due, if it is: a sleep
-- whose time has come succeeds with {"slept_until": …}; a wait whose timeout_at has
-- passed fails (code timeout) or, with on_timeout continue, succeeds with a null
-- output. Returns whether it woke the step. The caller holds the step's row lock.
-- +goose StatementBegin
CREATE FUNCTION cairn_step_wake(p_run uuid, p_key text)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    s record;
BEGIN
    SELECT status, wait_kind, wait_until, wait_name, waiting_since, timeout_at, on_timeout INTO s
      FROM steps WHERE run_id = p_run AND key = p_key FOR UPDATE;
    IF NOT FOUND OR s.status <> 'suspended' THEN
        RETURN false;
    END IF;
    IF s.wait_kind = 'sleep' AND s.wait_until <= now() THEN
        PERFORM cairn_step_resolve(p_run, p_key, 'succeeded',
            jsonb_build_object('slept_until', s.wait_until), NULL, 'sleep_done');
        RETURN true;
    END IF;
    IF s.timeout_at <= now() THEN
        IF s.on_timeout = 'continue' THEN
            PERFORM cairn_step_resolve(p_run, p_key, 'succeeded', NULL, NULL, 'timeout');
        ELSE
            PERFORM cairn_step_resolve(p_run, p_key, 'failed', NULL,
                jsonb_build_object('message',
                    format('timed out waiting for %s after %s', s.wait_kind || coalesce(' ' || s.wait_name, ''),
                           date_trunc('second', s.timeout_at - s.waiting_since)),
                    'code', 'timeout'),
                'timeout');
        END IF;
        RETURN true;
    END IF;
    RETURN false;
END $$;
-- +goose StatementEnd

-- cairn_wake_due is the wake sweeper: up to p_limit due suspended steps (sleeps whose
-- time has come, waits whose timeout has passed) are woken (cairn_step_wake), oldest
-- due first. Held steps (of a paused run) are not: they wake once it resumes. Safe
-- to run from every dispatcher at once (SKIP LOCKED): each step is woken once.
-- Returns how many it woke.
-- +goose StatementBegin
CREATE FUNCTION cairn_wake_due(p_limit integer)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    r record;
    n integer := 0;
BEGIN
    FOR r IN
        SELECT run_id, key FROM steps
        WHERE status = 'suspended' AND NOT held AND least(wait_until, timeout_at) <= now()
        ORDER BY least(wait_until, timeout_at)
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    LOOP
        n := n + cairn_step_wake(r.run_id, r.key)::integer;
    END LOOP;
    RETURN n;
END $$;
-- +goose StatementEnd

-- cairn_step_suspend: a running step, fenced by its lease token (false, nothing
-- written, when the token is not its current lease), gives up its lease and waits:
--   p_kind        sleep, signal, approval or callback;
--   p_until       a sleep's end (required for sleep);
--   p_name        a signal's name (required for signal);
--   p_timeout_at  when the wait gives up (NULL: never);
--   p_on_timeout  fail (default) or continue.
-- Its attempt ends succeeded (it did its part: start the wait) and the step is
-- suspended (step.suspended with the wait). A signal step that finds a buffered
-- signal of its name takes the oldest at once and succeeds without suspending (no
-- step.suspended); a wait already due is woken at once (cairn_step_wake).
-- Raises CA422 for a bad kind, a missing until or name, or a bad on_timeout.
-- +goose StatementBegin
CREATE FUNCTION cairn_step_suspend(p_run uuid, p_key text, p_token bigint, p_kind text,
                                   p_until timestamptz, p_name text, p_timeout_at timestamptz,
                                   p_on_timeout text)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_attempt integer;
    v_signal  record;
BEGIN
    IF p_kind IS NULL OR p_kind NOT IN ('sleep', 'signal', 'approval', 'callback') THEN
        RAISE EXCEPTION 'wait kind % is not sleep, signal, approval or callback', p_kind USING ERRCODE = 'CA422';
    END IF;
    IF p_kind = 'sleep' AND p_until IS NULL THEN
        RAISE EXCEPTION 'a sleep needs its end (until)' USING ERRCODE = 'CA422';
    END IF;
    IF p_kind = 'signal' AND p_name IS NULL THEN
        RAISE EXCEPTION 'a signal wait needs the signal''s name' USING ERRCODE = 'CA422';
    END IF;
    IF coalesce(p_on_timeout, 'fail') NOT IN ('fail', 'continue') THEN
        RAISE EXCEPTION 'on_timeout % is not fail or continue', p_on_timeout USING ERRCODE = 'CA422';
    END IF;

    SELECT attempts INTO v_attempt FROM steps
     WHERE run_id = p_run AND key = p_key AND lease_token = p_token AND status = 'running'
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false; -- lease lost
    END IF;

    UPDATE steps SET status = 'suspended', wait_kind = p_kind, wait_until = p_until, wait_name = p_name,
        waiting_since = now(), timeout_at = p_timeout_at, on_timeout = coalesce(p_on_timeout, 'fail'),
        lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
    WHERE run_id = p_run AND key = p_key;
    UPDATE attempts SET status = 'succeeded', finished_at = now()
    WHERE run_id = p_run AND step_key = p_key AND number = v_attempt;

    IF p_kind = 'signal' THEN
        SELECT seq, payload INTO v_signal FROM signals
         WHERE run_id = p_run AND name = p_name AND consumed_by IS NULL
         ORDER BY seq LIMIT 1
           FOR UPDATE;
        IF FOUND THEN
            UPDATE signals SET consumed_by = p_key, consumed_at = now() WHERE seq = v_signal.seq;
            PERFORM cairn_step_resolve(p_run, p_key, 'succeeded', v_signal.payload, NULL, 'signal');
            RETURN true;
        END IF;
    END IF;

    PERFORM cairn_event(p_run, 'step.suspended', p_key, v_attempt, jsonb_strip_nulls(jsonb_build_object(
        'kind', p_kind, 'until', p_until, 'name', p_name, 'timeout_at', p_timeout_at,
        'on_timeout', coalesce(p_on_timeout, 'fail'))));
    IF least(p_until, p_timeout_at) <= now() THEN
        PERFORM cairn_step_wake(p_run, p_key);
    END IF;
    RETURN true;
END $$;
-- +goose StatementEnd

-- cairn_signal_send delivers a signal p_name with p_payload to run p_run, sent by
-- p_actor. With p_idempotency_key, a repeat (same run, name and key) is the same
-- signal: nothing is written and its seq is returned with duplicate true. Otherwise
-- the signal is stored (signal.received with actor, name, seq) and, when a step of
-- the run waits for that name, the oldest buffered signal of that name (this one,
-- unless older ones wait) completes it (cairn_step_resolve); else it stays buffered.
-- Returns the signal's seq, the step it completed (NULL while buffered) and
-- whether it was a repeat. Raises CA404 for no such run, CA409 for a run that has
-- ended. The caller checks that the run's version has a signal step of that name.
-- +goose StatementBegin
CREATE FUNCTION cairn_signal_send(p_run uuid, p_name text, p_payload jsonb, p_idempotency_key text, p_actor text,
                                  OUT seq bigint, OUT step text, OUT duplicate boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_status text;
    v_step   text;
    v_oldest record;
BEGIN
    duplicate := false;
    SELECT status INTO v_status FROM runs WHERE id = p_run;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'run % not found', p_run USING ERRCODE = 'CA404';
    END IF;
    IF p_idempotency_key IS NOT NULL THEN
        SELECT s.seq, s.consumed_by INTO seq, step FROM signals s
         WHERE s.run_id = p_run AND s.name = p_name AND s.idempotency_key = p_idempotency_key;
        IF FOUND THEN
            duplicate := true;
            RETURN;
        END IF;
    END IF;
    IF v_status IN ('succeeded', 'failed', 'canceled') THEN
        RAISE EXCEPTION 'run % has finished (%): it takes no more signals', p_run, v_status USING ERRCODE = 'CA409';
    END IF;

    -- The step waiting for it, locked first (steps before the run's row).
    SELECT s.key INTO v_step FROM steps s
     WHERE s.run_id = p_run AND s.status = 'suspended' AND s.wait_kind = 'signal' AND s.wait_name = p_name
     ORDER BY s.waiting_since, s.key LIMIT 1
       FOR UPDATE;

    INSERT INTO signals (run_id, name, payload, idempotency_key, actor)
    VALUES (p_run, p_name, p_payload, p_idempotency_key, p_actor)
    ON CONFLICT (run_id, name, idempotency_key) DO NOTHING
    RETURNING signals.seq INTO seq;
    IF seq IS NULL THEN
        -- The same key, sent concurrently, committed first.
        SELECT s.seq, s.consumed_by INTO seq, step FROM signals s
         WHERE s.run_id = p_run AND s.name = p_name AND s.idempotency_key = p_idempotency_key;
        duplicate := true;
        RETURN;
    END IF;
    PERFORM cairn_event(p_run, 'signal.received', NULL, NULL, jsonb_strip_nulls(jsonb_build_object(
        'name', p_name, 'seq', seq, 'actor', p_actor, 'idempotency_key', p_idempotency_key,
        'payload', CASE WHEN jsonb_typeof(p_payload) = 'object' AND p_payload ? '$blob' THEN p_payload END)));

    IF v_step IS NOT NULL THEN
        SELECT s.seq, s.payload INTO v_oldest FROM signals s
         WHERE s.run_id = p_run AND s.name = p_name AND s.consumed_by IS NULL
         ORDER BY s.seq LIMIT 1
           FOR UPDATE;
        UPDATE signals s SET consumed_by = v_step, consumed_at = now() WHERE s.seq = v_oldest.seq;
        PERFORM cairn_step_resolve(p_run, v_step, 'succeeded', v_oldest.payload, NULL, 'signal');
        IF v_oldest.seq = seq THEN
            step := v_step;
        END IF;
    END IF;
END $$;
-- +goose StatementEnd

-- cairn_run_hold: as in 00005, holding suspended steps too (the sweeper does not
-- wake them while the run is paused).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_run_hold(p_run uuid, p_kind text, p_actor text, p_note text)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_status text;
BEGIN
    -- Steps first (see the lock order above).
    UPDATE steps SET held = true
    WHERE run_id = p_run AND status IN ('waiting', 'ready', 'running', 'suspended') AND NOT held;
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

-- cairn_run_cancel: as in 00005, canceling suspended steps too.
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
    WHERE run_id = p_run AND status IN ('waiting', 'ready', 'running', 'suspended');
    UPDATE steps SET held = false WHERE run_id = p_run AND held;
    UPDATE runs SET status = 'canceled', finished_at = now(), steps_remaining = 0, pause_reason = NULL,
        error = jsonb_build_object('message', coalesce(nullif(p_reason, ''), 'canceled'))
    WHERE id = p_run;
    PERFORM cairn_event(p_run, 'run.canceled', NULL, NULL, jsonb_build_object('reason', p_reason));
    PERFORM pg_notify('cairn_cancel', p_run::text);
END $$;
-- +goose StatementEnd

-- cairn_step_finish: as in 00005; a parked step holds the run's suspended steps too.
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
END $$;
-- +goose StatementEnd

-- +goose Down
-- The functions of 00005, as they were.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_run_hold(p_run uuid, p_kind text, p_actor text, p_note text)
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

DROP FUNCTION cairn_signal_send(uuid, text, jsonb, text, text);
DROP FUNCTION cairn_step_suspend(uuid, text, bigint, text, timestamptz, text, timestamptz, text);
DROP FUNCTION cairn_wake_due(integer);
DROP FUNCTION cairn_step_wake(uuid, text);
DROP FUNCTION cairn_step_resolve(uuid, text, text, jsonb, jsonb, text);
DROP TABLE signals;
DROP INDEX steps_signal_wait_idx;
DROP INDEX steps_wake_idx;
ALTER TABLE steps DROP CONSTRAINT steps_suspended_wait_check;
ALTER TABLE steps DROP COLUMN on_timeout, DROP COLUMN timeout_at, DROP COLUMN waiting_since,
    DROP COLUMN wait_name, DROP COLUMN wait_until, DROP COLUMN wait_kind;
ALTER TABLE steps DROP CONSTRAINT steps_status_check;
ALTER TABLE steps ADD CONSTRAINT steps_status_check
    CHECK (status IN ('waiting', 'ready', 'running', 'succeeded', 'failed', 'canceled', 'skipped'));
