-- +goose Up
-- A signal sent while its step suspends was lost: cairn_step_suspend looked for a
-- buffered signal before the sender's row was committed, and cairn_signal_send
-- looked for a suspended step before the suspension was committed, so the signal
-- stayed buffered and the step waited. Both now take a transaction-scoped advisory
-- lock on (run, signal name) first: one of them sees the other's work.

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_step_suspend(p_run uuid, p_key text, p_token bigint, p_kind text,
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
    IF p_kind = 'signal' THEN
        -- Beside cairn_signal_send: the two take turns on the run's signals of
        -- that name, so that a signal sent while this step suspends is either
        -- seen here (buffered) or finds the step suspended.
        PERFORM pg_advisory_xact_lock(hashtextextended('cairn_signal:' || p_run::text || ':' || p_name, 0));
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

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_signal_send(p_run uuid, p_name text, p_payload jsonb, p_idempotency_key text, p_actor text,
                                  OUT seq bigint, OUT step text, OUT duplicate boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_status text;
    v_step   text;
    v_oldest record;
BEGIN
    duplicate := false;
    -- Beside cairn_step_suspend of a signal wait of that name: see there.
    PERFORM pg_advisory_xact_lock(hashtextextended('cairn_signal:' || p_run::text || ':' || p_name, 0));
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

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_step_suspend(p_run uuid, p_key text, p_token bigint, p_kind text,
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

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_signal_send(p_run uuid, p_name text, p_payload jsonb, p_idempotency_key text, p_actor text,
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
