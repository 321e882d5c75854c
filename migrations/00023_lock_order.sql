-- +goose Up
-- One lock order for the writers of a run, so that cancelling a run while its
-- steps finish cannot deadlock. Before, cairn_run_cancel locked the run's row and
-- then its steps, while a finishing batch (cairn_steps_succeed, cairn_step_finish)
-- and a claim lock steps, then the run's row: on a wide run, cancel and the
-- finishers waited for each other in a circle, and after the retries the cancel
-- failed. Now:
--   1. a transaction level advisory lock per run (cairn_run_lock): exclusive for
--      cancel and a run's deadline, shared for the writers of its steps
--      (cairn_runs_share, taken by the statements in catalog/ that finish, suspend,
--      resolve, decide or expand steps, before they write anything), so a cancel
--      waits for the batches in flight and new ones wait for it; the writers do
--      not wait for each other;
--   2. the steps, in key order;
--   3. the run's row.
-- A claim takes no advisory lock: it skips locked steps, and then only waits for
-- the run's row, which cancel takes last. Pause, resume, retry and rerun still
-- take the run's row first (they meet running finishers far less often).

-- cairn_run_lock takes run p_run's advisory lock, exclusive, until the end of the
-- transaction.
-- +goose StatementBegin
CREATE FUNCTION cairn_run_lock(p_run uuid)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('cairn_run:' || p_run::text, 0));
END $$;
-- +goose StatementEnd

-- cairn_runs_share takes the advisory lock of each run in p_runs, shared, until
-- the end of the transaction, in descending order of the run's ID (the order in
-- which a bulk operation visits runs, catalog/operation.go). It returns true, so
-- that a statement can take the locks in its WHERE clause before it writes.
-- +goose StatementBegin
CREATE FUNCTION cairn_runs_share(p_runs uuid[])
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('cairn_run:' || r::text, 0))
    FROM (SELECT DISTINCT r FROM unnest(p_runs) AS r ORDER BY r DESC) x;
    RETURN true;
END $$;
-- +goose StatementEnd

-- cairn_run_cancel: as in 00014, taking its locks in the order above.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_run_cancel(p_run uuid, p_reason text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_status text;
BEGIN
    -- The lock order at the top of migration 00023.
    PERFORM cairn_run_lock(p_run);
    PERFORM 1 FROM steps WHERE run_id = p_run AND status IN ('waiting', 'ready', 'running', 'suspended')
        ORDER BY key FOR UPDATE;
    SELECT status INTO v_status FROM runs WHERE id = p_run FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'run % not found', p_run USING ERRCODE = 'CA404';
    END IF;
    IF v_status NOT IN ('pending', 'running', 'paused', 'compensating') THEN
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

-- cairn_run_deadlines: as in 00016, taking its locks in the order above (it took
-- the run's row first, SKIP LOCKED); the earliest deadlines first, locked in
-- descending order of their IDs, as a bulk operation visits runs.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_run_deadlines(p_limit integer)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    r record;
    n integer := 0;
BEGIN
    FOR r IN
        SELECT * FROM (
            SELECT id, deadline_at FROM runs
            WHERE deadline_at <= now() AND status IN ('pending', 'running', 'paused')
            ORDER BY deadline_at
            LIMIT p_limit) due
        ORDER BY id DESC
    LOOP
        -- The lock order of cairn_run_cancel: the run's advisory lock, its
        -- steps, its row (then checked again: another dispatcher may have failed
        -- it meanwhile).
        PERFORM cairn_run_lock(r.id);
        PERFORM 1 FROM steps WHERE run_id = r.id AND status IN ('waiting', 'ready', 'running', 'suspended')
            ORDER BY key FOR UPDATE;
        PERFORM 1 FROM runs WHERE id = r.id AND deadline_at <= now() AND status IN ('pending', 'running', 'paused')
            FOR UPDATE;
        CONTINUE WHEN NOT FOUND;
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

-- +goose Down
-- cairn_run_cancel: as in 00014.
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
    IF v_status NOT IN ('pending', 'running', 'paused', 'compensating') THEN
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

-- cairn_run_deadlines: as in 00016.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_run_deadlines(p_limit integer)
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

DROP FUNCTION cairn_runs_share(uuid[]);
DROP FUNCTION cairn_run_lock(uuid);
