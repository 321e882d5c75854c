-- +goose Up
-- One lock order for every writer of a run (issue 33 §2), and the history of a
-- retried run's steps and a rerun's completion order (§4, at the end). Migration 00023 gave
-- cancel and the finishers one order (the run's advisory lock, its steps, its
-- row); pause, resume, retry, a parent's cancel or pause reaching its children,
-- the wait and queue sweepers and the child → parent path still took others, and
-- PostgreSQL broke the circles they met in (catalog TestLockOrderStress: 1 to 8
-- deadlocks in 8 s of finishers, child runs, waits, signals, deadlines, pause,
-- resume, cancel, retry and rerun at once). From here every transaction that
-- writes a run takes, in this order:
--   0. the rows of workflows it reads or pauses (FOR KEY SHARE to create, retry
--      or rerun a run; FOR UPDATE to pause or resume the workflow);
--   1. the advisory locks of the runs it writes (cairn_runs_order): a run's
--      ancestors (parent_id, up to the root) before it, shared, and otherwise by
--      depth, then descending ID. Shared for a writer of a run's steps
--      (cairn_runs_share: finishers, suspends, resolves, decisions, signals, map
--      expansions, the sweepers of waits and queue timeouts, a rerun's source);
--      exclusive for cancel, a deadline, pause, resume and retry (cairn_runs_lock,
--      cairn_run_lock). A writer of a child run so holds its parent's lock when
--      the child's end resolves the parent's step (runs_child_ended), and a
--      parent's cancel, pause or resume, holding the parent's lock exclusively,
--      never meets a writer of its children in a circle.
--   2. the run's steps it writes, in key order (the finishers lock theirs by
--      key; a claim skips locked steps);
--   3. the run's row. A child run that ends then resolves its parent's step
--      (the parent's advisory lock was taken in 1) only if the parent's step and
--      row can be had at once; else the wake sweeper does it in a transaction
--      of its own (cairn_child_ended, child_run_ends).
-- A transaction that takes several runs' exclusive locks takes them all first,
-- in the order of 1 (cairn_runs_lock over the set: deadlines, a workflow's pause,
-- a bulk operation's batch). The sweepers of waits and queue timeouts end one
-- step a transaction (catalog WakeDue, QueueTimeouts), as StepResolve does: one
-- run's locks, never a run's row while waiting for another run's step. A claim
-- takes no advisory lock: it skips locked steps and then only waits for run
-- rows, which everyone takes last.

-- cairn_runs_order lists the runs p_runs and their ancestors in the lock order
-- above: by depth (a root run is at 0), then by descending ID. given is true for
-- the runs of p_runs (false for an ancestor only). A run that does not exist is
-- listed at depth 0 (its lock guards its creation as well). The bound on the
-- depth costs nothing: a parent is always created before its child.
-- +goose StatementBegin
CREATE FUNCTION cairn_runs_order(p_runs uuid[])
RETURNS TABLE (id uuid, given boolean) LANGUAGE sql STABLE AS $$
    WITH RECURSIVE up(start, id, parent_id, hops) AS (
        SELECT x.g, x.g, r.parent_id, 0
        FROM (SELECT DISTINCT g FROM unnest(p_runs) AS g) x LEFT JOIN runs r ON r.id = x.g
        UNION ALL
        SELECT up.start, r.id, r.parent_id, up.hops + 1
        FROM up JOIN runs r ON r.id = up.parent_id
        WHERE up.hops < 1000
    ), chain AS (
        SELECT up.id, max(up.hops) OVER (PARTITION BY up.start) - up.hops AS depth, up.id = up.start AS given
        FROM up
    )
    SELECT chain.id, bool_or(chain.given) FROM chain GROUP BY chain.id, chain.depth ORDER BY chain.depth, chain.id DESC
$$;
-- +goose StatementEnd

-- cairn_runs_share takes the advisory lock of each run in p_runs, shared, and
-- those of their ancestors, until the end of the transaction, in the order of
-- cairn_runs_order. It returns true, so that a statement can take the locks in
-- its WHERE clause before it writes.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_runs_share(p_runs uuid[])
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT o.id FROM cairn_runs_order(p_runs) o LOOP
        PERFORM pg_advisory_xact_lock_shared(hashtextextended('cairn_run:' || r.id::text, 0));
    END LOOP;
    RETURN true;
END $$;
-- +goose StatementEnd

-- cairn_runs_lock takes the advisory lock of each run in p_runs, exclusive, and
-- those of their ancestors, shared (exclusive when they are in p_runs too), until
-- the end of the transaction, in the order of cairn_runs_order. It returns true.
-- +goose StatementBegin
CREATE FUNCTION cairn_runs_lock(p_runs uuid[])
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT o.id, o.given FROM cairn_runs_order(p_runs) o LOOP
        IF r.given THEN
            PERFORM pg_advisory_xact_lock(hashtextextended('cairn_run:' || r.id::text, 0));
        ELSE
            PERFORM pg_advisory_xact_lock_shared(hashtextextended('cairn_run:' || r.id::text, 0));
        END IF;
    END LOOP;
    RETURN true;
END $$;
-- +goose StatementEnd

-- cairn_run_lock takes run p_run's advisory lock, exclusive, after its
-- ancestors', shared (cairn_runs_lock).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_run_lock(p_run uuid)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cairn_runs_lock(ARRAY[p_run]);
END $$;
-- +goose StatementEnd

-- cairn_children_follow: as in 00015, each child locked in the order above (its
-- advisory lock, exclusive, then its steps: cairn_run_control_lock) before its
-- row, and looked at again under those locks. Before, it locked the children's
-- rows first, and a child's finisher (its steps, then its row) met it in a
-- circle. A child that ended meanwhile is left as it is.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_children_follow()
RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    c       record;
    v_actor text := 'parent:' || NEW.id;
BEGIN
    IF NEW.status = 'canceled' THEN
        FOR c IN SELECT id FROM runs
                  WHERE parent_id = NEW.id AND parent_step IS NOT NULL AND status IN ('pending', 'running', 'paused')
                  ORDER BY id DESC
        LOOP
            PERFORM cairn_run_control_lock(c.id);
            CONTINUE WHEN NOT EXISTS (SELECT 1 FROM runs WHERE id = c.id AND status IN ('pending', 'running', 'paused'));
            PERFORM cairn_run_cancel(c.id, format('parent run %s canceled', NEW.id));
        END LOOP;
    ELSIF NEW.status = 'paused' AND NEW.pause_reason = 'run' THEN
        FOR c IN SELECT id FROM runs
                  WHERE parent_id = NEW.id AND parent_step IS NOT NULL AND status IN ('pending', 'running')
                  ORDER BY id DESC
        LOOP
            PERFORM cairn_run_control_lock(c.id);
            CONTINUE WHEN NOT EXISTS (SELECT 1 FROM runs WHERE id = c.id AND status IN ('pending', 'running'));
            PERFORM cairn_run_pause(c.id, v_actor, format('parent run %s paused', NEW.id));
        END LOOP;
    ELSIF OLD.status = 'paused' AND NEW.status IN ('pending', 'running') THEN
        FOR c IN SELECT r.id FROM runs r
                  WHERE r.parent_id = NEW.id AND r.parent_step IS NOT NULL AND r.status = 'paused'
                    AND r.pause_reason = 'run'
                  ORDER BY r.id DESC
        LOOP
            PERFORM cairn_run_control_lock(c.id);
            CONTINUE WHEN NOT EXISTS (
                SELECT 1 FROM runs r
                WHERE r.id = c.id AND r.status = 'paused' AND r.pause_reason = 'run'
                  AND (SELECT e.data ->> 'actor' FROM events e
                        WHERE e.run_id = r.id AND e.type = 'run.paused' ORDER BY e.seq DESC LIMIT 1) = v_actor);
            PERFORM cairn_run_resume(c.id, v_actor, format('parent run %s resumed', NEW.id));
        END LOOP;
    END IF;
    RETURN NULL;
END $$;
-- +goose StatementEnd

-- cairn_run_deadlines: as in 00023, the exclusive locks of every run it fails
-- taken first, together, in the order above (one run after the other, a run's
-- lock could be taken after its child's).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_run_deadlines(p_limit integer)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    r     record;
    n     integer := 0;
    v_due uuid[];
BEGIN
    SELECT array_agg(d.id) INTO v_due FROM (
        SELECT id FROM runs
        WHERE deadline_at <= now() AND status IN ('pending', 'running', 'paused')
        ORDER BY deadline_at
        LIMIT p_limit) d;
    IF v_due IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM cairn_runs_lock(v_due);
    FOR r IN SELECT id, deadline_at FROM runs WHERE id = ANY (v_due) ORDER BY id DESC
    LOOP
        -- The lock order of cairn_run_cancel: its steps, its row (then checked
        -- again: it may have ended meanwhile).
        PERFORM 1 FROM steps WHERE run_id = r.id AND status IN ('waiting', 'ready', 'running', 'suspended')
            ORDER BY key FOR UPDATE;
        PERFORM 1 FROM runs WHERE id = r.id AND deadline_at <= now() AND status IN ('pending', 'running', 'paused')
            FOR NO KEY UPDATE;
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

-- child_run_ends holds the ends of child runs whose parent's step was busy when
-- they ended (cairn_child_ended): the wake sweeper resolves it then
-- (cairn_wake_next), in a transaction of its own.
CREATE TABLE child_run_ends (
    child_id uuid PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
    ended_at timestamptz NOT NULL DEFAULT now()
);

-- cairn_child_ended: a child run that ends resolves its parent's step
-- (cairn_child_resolve, as in 00015) in its own transaction when the parent's
-- step and row can be had at once, and leaves it to the wake sweeper otherwise
-- (child_run_ends). The child's finisher holds the child's steps and row, and
-- run rows of other runs it finished in the same batch: waiting there for the
-- parent's row, it met a claim that held the parent's row and waited for one of
-- those in a circle. It waits at most 20 ms for any lock of the parent's (far
-- below deadlock_timeout, so no circle is ever found: the wait gives up first),
-- and the subtransaction gives back what it took of them.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_child_ended()
RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_timeout text := current_setting('lock_timeout');
BEGIN
    PERFORM set_config('lock_timeout', '20ms', true);
    BEGIN
        PERFORM cairn_child_resolve(NEW.id);
    EXCEPTION WHEN lock_not_available THEN
        PERFORM set_config('lock_timeout', v_timeout, true);
        INSERT INTO child_run_ends (child_id) VALUES (NEW.id) ON CONFLICT DO NOTHING;
    END;
    PERFORM set_config('lock_timeout', v_timeout, true);
    RETURN NULL;
END $$;
-- +goose StatementEnd

-- cairn_wake_next ends one due wait (a sleep's end or a timeout: cairn_step_wake)
-- of the earliest due ones that no other sweeper holds, or resolves the parent's
-- step of a child run's end left in child_run_ends, in the lock order above: the
-- run's shared lock, tried without waiting (a run being canceled, paused or
-- retried is left to the next round), then the step, then the run's row. 1 when
-- it did one, 0 when none is due, -1 when the due ones are busy. It replaces
-- cairn_wake_due, which ended many in one transaction, holding a run's row while
-- it waited for another run's steps.
-- +goose StatementBegin
CREATE FUNCTION cairn_wake_next()
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    r       record;
    v_child uuid;
BEGIN
    SELECT e.child_id INTO v_child FROM child_run_ends e ORDER BY e.ended_at LIMIT 1 FOR UPDATE SKIP LOCKED;
    IF FOUND THEN
        SELECT parent_id INTO r FROM runs WHERE id = v_child;
        IF r.parent_id IS NOT NULL AND NOT cairn_runs_try_share(r.parent_id) THEN
            RETURN -1;
        END IF;
        PERFORM cairn_child_resolve(v_child);
        DELETE FROM child_run_ends WHERE child_id = v_child;
        RETURN 1;
    END IF;
    SELECT run_id, key INTO r FROM steps
    WHERE status = 'suspended' AND NOT held AND least(wait_until, timeout_at) <= now()
    ORDER BY least(wait_until, timeout_at)
    LIMIT 1
    FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN CASE WHEN EXISTS (SELECT 1 FROM steps
                                 WHERE status = 'suspended' AND NOT held AND least(wait_until, timeout_at) <= now())
                    THEN -1 ELSE 0 END;
    END IF;
    IF NOT cairn_runs_try_share(r.run_id) THEN
        RETURN -1;
    END IF;
    RETURN cairn_step_wake(r.run_id, r.key)::integer;
END $$;
-- +goose StatementEnd

-- cairn_runs_try_share takes the shared advisory locks of run p_run and its
-- ancestors (cairn_runs_share's) without waiting: false, having taken only some,
-- when one of them is held exclusively. A sweeper that locked one of the run's
-- steps first (SKIP LOCKED: it never waits for them) takes them so, and gives up
-- the step when it cannot.
-- +goose StatementBegin
CREATE FUNCTION cairn_runs_try_share(p_run uuid)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT o.id FROM cairn_runs_order(ARRAY[p_run]) o LOOP
        IF NOT pg_try_advisory_xact_lock_shared(hashtextextended('cairn_run:' || r.id::text, 0)) THEN
            RETURN false;
        END IF;
    END LOOP;
    RETURN true;
END $$;
-- +goose StatementEnd

-- cairn_queue_timeout_next fails one ready step whose queue_timeout has passed
-- (as cairn_queue_timeouts of 00016 did for many): terminal, code queue_timeout,
-- its dependents skipped; in the lock order above, as cairn_wake_next, and with
-- its answers.
-- +goose StatementBegin
CREATE FUNCTION cairn_queue_timeout_next()
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    r      record;
    v_err  jsonb;
    v_skip integer;
BEGIN
    SELECT run_id, key, attempts, queue_timeout_s INTO r FROM steps
    WHERE status = 'ready' AND queue_timeout_s IS NOT NULL AND NOT held
      AND ready_at + make_interval(secs => queue_timeout_s) <= now()
    ORDER BY ready_at
    LIMIT 1
    FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    IF NOT cairn_runs_try_share(r.run_id) THEN
        RETURN -1;
    END IF;
    v_err := jsonb_build_object('message',
        format('the step waited over its queue_timeout (%ss) to start', r.queue_timeout_s),
        'code', 'queue_timeout');
    UPDATE steps SET status = 'failed', finished_at = now(), last_error = v_err
    WHERE run_id = r.run_id AND key = r.key;
    v_skip := cairn_skip_dependents(r.run_id, r.key);
    PERFORM cairn_event(r.run_id, 'step.failed', r.key, r.attempts, jsonb_build_object('error', v_err));
    PERFORM cairn_run_settle(r.run_id, 1 + v_skip);
    RETURN 1;
END $$;
-- +goose StatementEnd

DROP FUNCTION cairn_wake_due(integer);
DROP FUNCTION cairn_queue_timeouts(integer);

-- cairn_workflow_pause and cairn_workflow_resume: as in 00005, the runs' locks
-- taken in the order above: their advisory locks first, all together, then each
-- run's steps (cairn_run_control_lock) before its row. Before, they wrote the
-- steps of each run unordered and held them against its finishers.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_workflow_pause(p_name text, p_actor text, p_note text)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_ids uuid[];
    v_id  uuid;
    n     integer := 0;
BEGIN
    PERFORM 1 FROM workflows WHERE name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'workflow % not found', p_name USING ERRCODE = 'CA404';
    END IF;
    UPDATE workflows SET paused = true, paused_by = coalesce(paused_by, p_actor),
        paused_at = coalesce(paused_at, now())
    WHERE name = p_name;
    SELECT array_agg(id ORDER BY id) INTO v_ids FROM runs WHERE workflow = p_name AND status IN ('pending', 'running');
    IF v_ids IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM cairn_runs_lock(v_ids);
    FOREACH v_id IN ARRAY v_ids LOOP
        PERFORM cairn_run_control_lock(v_id);
        n := n + cairn_run_hold(v_id, 'workflow', p_actor, p_note)::integer;
    END LOOP;
    RETURN n;
END $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_workflow_resume(p_name text, p_actor text, p_note text)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_ids uuid[];
    v_id  uuid;
    n     integer := 0;
BEGIN
    PERFORM 1 FROM workflows WHERE name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'workflow % not found', p_name USING ERRCODE = 'CA404';
    END IF;
    UPDATE workflows SET paused = false, paused_by = NULL, paused_at = NULL
    WHERE name = p_name AND paused;
    SELECT array_agg(id ORDER BY id) INTO v_ids FROM runs
    WHERE workflow = p_name AND status = 'paused' AND pause_reason = 'workflow';
    IF v_ids IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM cairn_runs_lock(v_ids);
    FOREACH v_id IN ARRAY v_ids LOOP
        PERFORM cairn_run_control_lock(v_id);
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

-- cairn_run_cancel: as in 00023, its row locked FOR NO KEY UPDATE (it writes no key):
-- FOR UPDATE waited for every transaction that had inserted a row referring to
-- the run (events, attempts, a child run), and those may wait for this one's
-- advisory lock.
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
    SELECT status INTO v_status FROM runs WHERE id = p_run FOR NO KEY UPDATE;
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

-- cairn_run_hold: as in 00010, its row locked FOR NO KEY UPDATE, as cairn_run_cancel's.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_run_hold(p_run uuid, p_kind text, p_actor text, p_note text)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_status text;
BEGIN
    -- Steps first (see the lock order above).
    UPDATE steps SET held = true
    WHERE run_id = p_run AND status IN ('waiting', 'ready', 'running', 'suspended') AND NOT held;
    SELECT status INTO v_status FROM runs WHERE id = p_run FOR NO KEY UPDATE;
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

-- cairn_run_release: as in 00005, its row locked FOR NO KEY UPDATE, as cairn_run_cancel's.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_run_release(p_run uuid, p_actor text, p_note text, p_only text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_status text;
    v_reason text;
BEGIN
    -- Steps first (see the lock order above).
    UPDATE steps SET held = false WHERE run_id = p_run AND held;
    SELECT status, pause_reason INTO v_status, v_reason FROM runs WHERE id = p_run FOR NO KEY UPDATE;
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

-- cairn_run_settle: as in 00028, its row locked FOR NO KEY UPDATE, as cairn_run_cancel's.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_run_settle(p_run uuid, p_done integer)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_remaining integer;
    v_status    text;
    v_failed    record;
    v_error     jsonb;
    v_handlers  jsonb;
    v_n         integer;
    v_seq       bigint;
BEGIN
    IF p_done = 0 THEN
        -- Nothing to count: the row is read and locked, not rewritten unchanged.
        SELECT steps_remaining, status INTO v_remaining, v_status FROM runs
        WHERE id = p_run AND status IN ('pending', 'running', 'paused', 'compensating')
        FOR NO KEY UPDATE;
    ELSE
        UPDATE runs SET steps_remaining = greatest(steps_remaining - p_done, 0)
        WHERE id = p_run AND status IN ('pending', 'running', 'paused', 'compensating')
        RETURNING steps_remaining, status INTO v_remaining, v_status;
    END IF;
    IF v_remaining IS DISTINCT FROM 0 THEN
        RETURN;
    END IF;
    IF v_status = 'paused' THEN
        UPDATE steps SET held = false WHERE run_id = p_run AND held;
    END IF;

    IF v_status = 'compensating' THEN
        SELECT jsonb_agg(jsonb_strip_nulls(jsonb_build_object('step', key, 'phase', phase,
                   'compensates', compensates, 'error', last_error)) ORDER BY finished_at, key)
          INTO v_handlers
          FROM steps WHERE run_id = p_run AND phase <> 'main' AND status = 'failed';
        SELECT error INTO v_error FROM runs WHERE id = p_run;
        IF v_handlers IS NOT NULL THEN
            v_error := v_error || jsonb_build_object(
                'message', (v_error ->> 'message') || '; failure handler ' ||
                    (SELECT string_agg(h ->> 'step', ', ') FROM jsonb_array_elements(v_handlers) AS h) || ' failed too',
                'handlers_failed', v_handlers);
        END IF;
        UPDATE runs SET status = 'failed', finished_at = now(), error = v_error WHERE id = p_run;
        PERFORM cairn_event(p_run, 'run.failed', NULL, NULL, jsonb_strip_nulls(jsonb_build_object(
            'step', v_error ->> 'step', 'handlers_failed', v_handlers)));
        RETURN;
    END IF;

    SELECT key, last_error INTO v_failed FROM steps
    WHERE run_id = p_run AND status = 'failed' AND phase = 'main' AND map_parent IS NULL
    ORDER BY finished_at, key LIMIT 1;
    IF FOUND THEN
        v_error := jsonb_build_object('message', 'step ' || v_failed.key || ' failed',
                                      'step', v_failed.key, 'cause', v_failed.last_error);
        v_n := cairn_run_compensate(p_run);
        IF v_n > 0 THEN
            UPDATE runs SET status = 'compensating', pause_reason = NULL, error = v_error,
                steps_total = steps_total + v_n, steps_remaining = v_n
            WHERE id = p_run;
            PERFORM cairn_event(p_run, 'run.compensating', NULL, NULL, jsonb_build_object(
                'step', v_failed.key,
                'steps', (SELECT to_jsonb(array_agg(s.key ORDER BY s.phase = 'on_failure', m.finished_at DESC,
                                                                   m.key DESC, s.key))
                          FROM steps s LEFT JOIN steps m ON m.run_id = s.run_id AND m.key = s.compensates
                          WHERE s.run_id = p_run AND s.phase <> 'main')));
            PERFORM cairn_wake();
            RETURN;
        END IF;
        UPDATE runs SET status = 'failed', finished_at = now(), pause_reason = NULL, error = v_error
        WHERE id = p_run;
        PERFORM cairn_event(p_run, 'run.failed', NULL, NULL, jsonb_build_object('step', v_failed.key));
    ELSE
        -- The run.succeeded event's revision in the same write (as cairn_event).
        UPDATE runs SET status = 'succeeded', finished_at = now(), pause_reason = NULL,
            revision = revision + 1
        WHERE id = p_run RETURNING revision INTO v_seq;
        INSERT INTO events (run_id, seq, type) VALUES (p_run, v_seq, 'run.succeeded');
    END IF;
END $$;
-- +goose StatementEnd

-- cairn_steps_succeed: as in 00032, the runs' rows locked in ascending order of
-- their IDs (lk), as cairn_step_finish's batches (sorted by run) and the claims
-- (by primary key) take them; the update took them in the order of its join, and
-- two finishing batches over the same runs met in a circle.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_steps_succeed(p_runs uuid[], p_keys text[], p_tokens bigint[],
                                    p_outputs text[], p_log_keys text[], p_wake boolean,
                                    OUT ords bigint[], OUT ready bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_ended     uuid[];
    v_skip_runs uuid[];
    v_skip_keys text[];
BEGIN
    WITH b AS (
        SELECT * FROM unnest(p_runs, p_keys, p_tokens, p_outputs, p_log_keys)
            WITH ORDINALITY AS b(run_id, key, token, output, log_key, ord)
    ), done AS (
        UPDATE steps s SET status = 'succeeded', output = b.output::jsonb, finished_at = now(),
            lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
        FROM b
        WHERE s.run_id = b.run_id AND s.key = b.key AND s.lease_token = b.token
          AND (s.status = 'running') IS TRUE
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
            status = CASE WHEN s.deps_remaining = dec.n AND (s.trigger_rule <> 'any_failed' OR s.deps_failed > 0)
                          THEN 'ready' ELSE s.status END,
            ready_at = CASE WHEN s.deps_remaining = dec.n THEN now() ELSE s.ready_at END
        FROM dec
        WHERE s.run_id = dec.run_id AND s.key = dec.to_key AND s.status = 'waiting'
        RETURNING s.run_id, s.key, s.status, s.deps_remaining
    ), per_run AS (
        SELECT run_id, count(*) AS n, array_agg(key ORDER BY key) AS keys,
               array_agg(attempts ORDER BY key) AS atts, array_agg(output ORDER BY key) AS outs
        FROM done GROUP BY run_id
    ), lk AS (
        SELECT runs.id FROM runs WHERE runs.id IN (SELECT per_run.run_id FROM per_run)
        ORDER BY runs.id FOR NO KEY UPDATE
    ), r AS (
        UPDATE runs SET revision = runs.revision + p.n,
            steps_remaining = greatest(runs.steps_remaining - p.n, 0)
        FROM per_run p JOIN lk ON lk.id = p.run_id WHERE runs.id = p.run_id
        RETURNING runs.id, runs.revision, p.n, runs.steps_remaining, p.keys, p.atts, p.outs
    ), ev AS (
        INSERT INTO events (run_id, seq, type, step_key, attempt, data)
        SELECT r.id, r.revision - r.n + k.ord, 'step.succeeded', k.key, k.att,
               CASE WHEN jsonb_typeof(k.output) = 'object' AND k.output ? '$blob'
                    THEN jsonb_build_object('output', k.output) ELSE '{}'::jsonb END
        FROM r CROSS JOIN LATERAL unnest(r.keys, r.atts, r.outs) WITH ORDINALITY AS k(key, att, output, ord)
    )
    SELECT (SELECT coalesce(array_agg(d.ord), '{}') FROM done d),
           (SELECT coalesce(array_agg(r.id ORDER BY r.id), '{}') FROM r WHERE r.steps_remaining = 0),
           (SELECT count(*) FROM deps WHERE deps.status = 'ready'),
           (SELECT coalesce(array_agg(deps.run_id ORDER BY deps.run_id, deps.key), '{}') FROM deps
             WHERE deps.status = 'waiting' AND deps.deps_remaining = 0),
           (SELECT coalesce(array_agg(deps.key ORDER BY deps.run_id, deps.key), '{}') FROM deps
             WHERE deps.status = 'waiting' AND deps.deps_remaining = 0)
    INTO ords, v_ended, ready, v_skip_runs, v_skip_keys;

    PERFORM cairn_run_settle(x, 0) FROM unnest(v_ended) AS x;
    FOR i IN 1 .. coalesce(cardinality(v_skip_runs), 0) LOOP
        PERFORM cairn_run_settle(v_skip_runs[i], cairn_step_skip(v_skip_runs[i], v_skip_keys[i], 'no_upstream_failed', NULL));
    END LOOP;
    IF ready > 0 AND p_wake THEN
        PERFORM cairn_wake();
    END IF;
END $$;
-- +goose StatementEnd

-- Saga and history correctness (issue 33 §4).
--
-- step_history keeps the steps of a run's earlier tries: a retry (cairn_run_retry)
-- resets the run's failed, canceled and skipped steps and drops its failure
-- handlers (compensations and on_failure steps: cairn_run_relayout deletes them),
-- and their rows as they were, with what they did, were lost (only their events
-- remained). Before it writes anything, the retry copies each step it replaces
-- there, whole (step: the row as JSON, read back as a steps row with
-- jsonb_populate_record), with the try it belonged to (try: 1 for the run's first,
-- 2 after one retry, …). A map's instances are not copied (their rows stay, and
-- the items API lists them). Only the retry writes here: the claim and the
-- finishers do not change.
CREATE TABLE step_history (
    run_id      uuid NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    try         integer NOT NULL CHECK (try > 0),
    step_key    text NOT NULL,
    step        jsonb NOT NULL,
    replaced_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, try, step_key)
);

-- cairn_run_retry: as in 00015, the run's locks taken in the order above (it
-- locked the run's row before its steps), and the steps it replaces kept in
-- step_history first, with the try they belonged to; its run.retried event names
-- the new try.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_run_retry(p_run uuid, p_version integer, p_actor text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_run      record;
    v_target   integer;
    v_mismatch text;
    v_started  boolean;
    v_total    integer;
    v_left     integer;
    v_keys     text[];
    v_workflow record;
    v_try      integer;
BEGIN
    -- The workflow's row first, FOR KEY SHARE (as sqlRunCreate): cairn_workflow_pause
    -- locks it FOR UPDATE before it holds the workflow's runs, so it waits for this
    -- retry and then holds the retried run, or this retry sees the workflow paused.
    SELECT w.paused, w.paused_by INTO v_workflow
    FROM workflows w WHERE w.name = (SELECT workflow FROM runs WHERE id = p_run) FOR KEY SHARE;
    -- Then the run's locks in the order of 00042: its advisory lock (exclusive,
    -- after its ancestors'), its steps in key order (those it may write: every
    -- step but a map's succeeded instances), its row.
    PERFORM cairn_run_lock(p_run);
    PERFORM 1 FROM steps WHERE run_id = p_run AND (map_parent IS NULL OR status <> 'succeeded')
        ORDER BY key FOR UPDATE;
    SELECT id, workflow, version, status INTO v_run FROM runs WHERE id = p_run FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'run % not found', p_run USING ERRCODE = 'CA404';
    END IF;
    IF v_run.status NOT IN ('failed', 'canceled') THEN
        RAISE EXCEPTION 'run % is %: only a failed or canceled run can be retried', p_run, v_run.status
            USING ERRCODE = 'CAR09';
    END IF;
    v_target := coalesce(nullif(p_version, 0), v_run.version);

    -- The steps this retry replaces (every step but a kept success, and a map's
    -- instances), as they were, with the try they belonged to.
    SELECT coalesce(max(h.try), 0) + 1 INTO v_try FROM step_history h WHERE h.run_id = p_run;
    INSERT INTO step_history (run_id, try, step_key, step)
    SELECT p_run, v_try, s.key, to_jsonb(s) FROM steps s
    WHERE s.run_id = p_run AND s.map_parent IS NULL AND (s.status <> 'succeeded' OR s.phase <> 'main');

    IF v_target <> v_run.version THEN
        PERFORM 1 FROM workflow_versions WHERE workflow = v_run.workflow AND version = v_target;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'workflow % has no version %', v_run.workflow, v_target USING ERRCODE = 'CA404';
        END IF;
        SELECT cairn_version_mismatch(v_run.workflow, v_target, array_agg(key ORDER BY key),
                                      array_agg(array_to_string(needs, ',') ORDER BY key))
          INTO v_mismatch
          FROM steps WHERE run_id = p_run AND status = 'succeeded' AND map_parent IS NULL;
        IF v_mismatch <> '' THEN
            RAISE EXCEPTION 'run % cannot move onto version % of %: steps it keeps differ there: %',
                p_run, v_target, v_run.workflow, v_mismatch USING ERRCODE = 'CAV09';
        END IF;

        -- Lay the steps the run does not keep out from the new version.
        DELETE FROM steps s
        WHERE s.run_id = p_run AND s.status <> 'succeeded' AND s.map_parent IS NULL
          AND NOT EXISTS (SELECT 1 FROM cairn_version_layout(v_run.workflow, v_target) l WHERE l.key = s.key);
        UPDATE steps s SET needs = l.needs, max_attempts = l.max_attempts, on_exhausted = l.on_exhausted
        FROM cairn_version_layout(v_run.workflow, v_target) l
        WHERE s.run_id = p_run AND s.key = l.key AND s.status <> 'succeeded';
        INSERT INTO steps (run_id, key, status, needs, deps_remaining, max_attempts, on_exhausted)
        SELECT p_run, l.key, 'waiting', l.needs, cardinality(l.needs), l.max_attempts, l.on_exhausted
        FROM cairn_version_layout(v_run.workflow, v_target) l
        WHERE NOT EXISTS (SELECT 1 FROM steps s WHERE s.run_id = p_run AND s.key = l.key);
        DELETE FROM step_edges WHERE run_id = p_run;
        INSERT INTO step_edges (run_id, from_key, to_key)
        SELECT p_run, n, s.key FROM steps s, unnest(s.needs) AS n WHERE s.run_id = p_run AND s.map_parent IS NULL;
    END IF;

    SELECT bool_or(attempts > 0) INTO v_started FROM steps WHERE run_id = p_run;

    -- Every step not kept runs again: ready when all it needs succeeded.
    WITH reset AS (
        UPDATE steps s SET
            status = CASE WHEN d.unmet = 0 THEN 'ready' ELSE 'waiting' END,
            deps_remaining = d.unmet,
            ready_at = CASE WHEN d.unmet = 0 THEN now() END,
            counted_attempts = 0,
            last_error = CASE WHEN s.status = 'skipped' THEN NULL ELSE s.last_error END,
            started_at = NULL, finished_at = NULL,
            lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, held = false
        FROM (SELECT t.key, (SELECT count(*) FROM steps u
                             WHERE u.run_id = p_run AND u.key = ANY (t.needs) AND u.status <> 'succeeded') AS unmet
              FROM steps t WHERE t.run_id = p_run AND t.status <> 'succeeded') d
        WHERE s.run_id = p_run AND s.key = d.key
        RETURNING s.key
    )
    SELECT coalesce(array_agg(key ORDER BY key), '{}') INTO v_keys FROM reset;

    SELECT count(*), count(*) FILTER (WHERE status <> 'succeeded') INTO v_total, v_left
    FROM steps WHERE run_id = p_run;
    UPDATE runs SET status = CASE WHEN coalesce(v_started, false) THEN 'running' ELSE 'pending' END,
        version = v_target, steps_total = v_total, steps_remaining = v_left,
        error = NULL, finished_at = NULL
    WHERE id = p_run;
    PERFORM cairn_event(p_run, 'run.retried', NULL, NULL,
        jsonb_build_object('actor', p_actor, 'version', v_target, 'previous_version', v_run.version,
                           'steps', to_jsonb(v_keys), 'try', v_try + 1));
    IF v_left = 0 THEN
        PERFORM cairn_run_settle(p_run, 0);
    ELSIF v_workflow.paused THEN
        -- Its workflow is paused: the run waits with the workflow's other runs.
        PERFORM cairn_run_hold(p_run, 'workflow', v_workflow.paused_by, 'its workflow is paused');
    ELSE
        PERFORM cairn_wake();
    END IF;
END $$;
-- +goose StatementEnd

-- cairn_run_rerun: as in 00009, the source's shared lock taken before its row,
-- and the steps it reuses keep the times they started and finished at in the
-- source (they were given the rerun's time, the same for all: the compensations
-- of a failed rerun, in reverse completion order with ties broken by key, undid
-- them in the wrong order).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_run_rerun(p_new uuid, p_source uuid, p_from text, p_input jsonb,
                                p_version integer, p_actor text, p_dry_run boolean)
RETURNS TABLE (reused text[], fresh text[]) LANGUAGE plpgsql AS $$
DECLARE
    v_src      record;
    v_target   integer;
    v_mismatch text;
    v_total    integer;
    v_paused   boolean;
BEGIN
    -- The workflow's row first, FOR KEY SHARE, as for a run created by its start
    -- (sqlRunCreate): a rerun in a paused workflow is created paused.
    SELECT w.paused INTO v_paused
    FROM workflows w WHERE w.name = (SELECT workflow FROM runs WHERE id = p_source) FOR KEY SHARE;
    -- Then the source's shared advisory lock (the order of 00042) before its row.
    PERFORM cairn_runs_share(ARRAY[p_source]);
    SELECT id, workflow, version, status, input, labels INTO v_src FROM runs WHERE id = p_source FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'run % not found', p_source USING ERRCODE = 'CA404';
    END IF;
    IF v_src.status NOT IN ('succeeded', 'failed', 'canceled') THEN
        RAISE EXCEPTION 'run % is %: only a run that has ended can be rerun', p_source, v_src.status
            USING ERRCODE = 'CAR09';
    END IF;
    v_target := coalesce(nullif(p_version, 0), v_src.version);
    PERFORM 1 FROM workflow_versions WHERE workflow = v_src.workflow AND version = v_target;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'workflow % has no version %', v_src.workflow, v_target USING ERRCODE = 'CA404';
    END IF;

    CREATE TEMP TABLE IF NOT EXISTS cairn_rerun_plan (ord bigint, key text, needs text[],
        max_attempts integer, reuse boolean, output jsonb, on_exhausted text,
        started_at timestamptz, finished_at timestamptz) ON COMMIT DROP;
    TRUNCATE cairn_rerun_plan;
    INSERT INTO cairn_rerun_plan (ord, key, needs, max_attempts, reuse, output, on_exhausted)
    SELECT l.ord, l.key, l.needs, l.max_attempts, false, NULL, l.on_exhausted
    FROM cairn_version_layout(v_src.workflow, v_target) l;
    PERFORM 1 FROM cairn_rerun_plan WHERE key = p_from;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'step % is not a step of version % of workflow %', p_from, v_target, v_src.workflow
            USING ERRCODE = 'CA422';
    END IF;

    -- Reused: not downstream of p_from, and succeeded in the source.
    WITH RECURSIVE down(key) AS (
        SELECT p_from
        UNION
        SELECT p.key FROM cairn_rerun_plan p JOIN down ON down.key = ANY (p.needs)
    )
    UPDATE cairn_rerun_plan p SET reuse = true, output = s.output, started_at = s.started_at,
        finished_at = s.finished_at
    FROM steps s
    WHERE s.run_id = p_source AND s.key = p.key AND s.status = 'succeeded'
      AND p.key NOT IN (SELECT key FROM down);

    IF v_target <> v_src.version THEN
        SELECT cairn_version_mismatch(v_src.workflow, v_target, array_agg(s.key ORDER BY s.key),
                                      array_agg(array_to_string(s.needs, ',') ORDER BY s.key))
          INTO v_mismatch
          FROM steps s JOIN cairn_rerun_plan p ON p.key = s.key AND p.reuse
          WHERE s.run_id = p_source;
        IF v_mismatch <> '' THEN
            RAISE EXCEPTION 'run % cannot be rerun on version % of %: steps it would reuse differ there: %',
                p_source, v_target, v_src.workflow, v_mismatch USING ERRCODE = 'CAV09';
        END IF;
    END IF;

    SELECT coalesce(array_agg(p.key ORDER BY p.ord) FILTER (WHERE p.reuse), '{}'),
           coalesce(array_agg(p.key ORDER BY p.ord) FILTER (WHERE NOT p.reuse), '{}'),
           count(*)
      INTO reused, fresh, v_total
      FROM cairn_rerun_plan p;
    IF p_dry_run THEN
        RETURN NEXT;
        RETURN;
    END IF;

    INSERT INTO runs (id, workflow, version, input, steps_total, steps_remaining, rerun_of, rerun_from_step,
                      labels, status, pause_reason)
    VALUES (p_new, v_src.workflow, v_target, coalesce(p_input, v_src.input), v_total,
            v_total - cardinality(reused), p_source, p_from, v_src.labels,
            CASE WHEN v_paused THEN 'paused' ELSE 'pending' END, CASE WHEN v_paused THEN 'workflow' END);
    INSERT INTO steps (run_id, key, status, needs, deps_remaining, max_attempts, ready_at, output, started_at,
                       finished_at, on_exhausted, held)
    SELECT p_new, p.key,
           CASE WHEN p.reuse THEN 'succeeded' WHEN d.unmet = 0 THEN 'ready' ELSE 'waiting' END,
           p.needs, CASE WHEN p.reuse THEN 0 ELSE d.unmet END, p.max_attempts,
           CASE WHEN NOT p.reuse AND d.unmet = 0 THEN now() END,
           p.output, p.started_at, p.finished_at,
           p.on_exhausted, v_paused AND NOT p.reuse
    FROM cairn_rerun_plan p
    CROSS JOIN LATERAL (SELECT count(*)::integer AS unmet FROM cairn_rerun_plan q
                        WHERE q.key = ANY (p.needs) AND NOT q.reuse) d;
    INSERT INTO step_edges (run_id, from_key, to_key)
    SELECT p_new, n, p.key FROM cairn_rerun_plan p, unnest(p.needs) AS n;
    PERFORM cairn_event(p_new, 'run.created', NULL, NULL,
        jsonb_build_object('workflow', v_src.workflow, 'version', v_target, 'rerun_of', p_source,
                           'from_step', p_from, 'actor', p_actor));
    IF cardinality(reused) > 0 THEN
        PERFORM cairn_event(p_new, 'step.reused', NULL, NULL,
            jsonb_build_object('steps', to_jsonb(reused), 'rerun_of', p_source));
    END IF;
    PERFORM cairn_wake();
    RETURN NEXT;
END $$;
-- +goose StatementEnd

-- +goose Down
-- cairn_runs_share: as in 00023.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_runs_share(p_runs uuid[])
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('cairn_run:' || r::text, 0))
    FROM (SELECT DISTINCT r FROM unnest(p_runs) AS r ORDER BY r DESC) x;
    RETURN true;
END $$;
-- +goose StatementEnd

-- cairn_run_lock: as in 00023.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_run_lock(p_run uuid)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('cairn_run:' || p_run::text, 0));
END $$;
-- +goose StatementEnd

-- cairn_children_follow: as in 00015.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_children_follow()
RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    c       record;
    v_actor text := 'parent:' || NEW.id;
BEGIN
    IF NEW.status = 'canceled' THEN
        FOR c IN SELECT id FROM runs
                  WHERE parent_id = NEW.id AND parent_step IS NOT NULL AND status IN ('pending', 'running', 'paused')
                  ORDER BY id
                  FOR UPDATE
        LOOP
            PERFORM cairn_run_cancel(c.id, format('parent run %s canceled', NEW.id));
        END LOOP;
    ELSIF NEW.status = 'paused' AND NEW.pause_reason = 'run' THEN
        FOR c IN SELECT id FROM runs
                  WHERE parent_id = NEW.id AND parent_step IS NOT NULL AND status IN ('pending', 'running')
                  ORDER BY id
                  FOR UPDATE
        LOOP
            PERFORM cairn_run_pause(c.id, v_actor, format('parent run %s paused', NEW.id));
        END LOOP;
    ELSIF OLD.status = 'paused' AND NEW.status IN ('pending', 'running') THEN
        FOR c IN SELECT r.id FROM runs r
                  WHERE r.parent_id = NEW.id AND r.parent_step IS NOT NULL AND r.status = 'paused'
                    AND r.pause_reason = 'run'
                    AND (SELECT e.data ->> 'actor' FROM events e
                          WHERE e.run_id = r.id AND e.type = 'run.paused' ORDER BY e.seq DESC LIMIT 1) = v_actor
                  ORDER BY r.id
                  FOR UPDATE OF r
        LOOP
            PERFORM cairn_run_resume(c.id, v_actor, format('parent run %s resumed', NEW.id));
        END LOOP;
    END IF;
    RETURN NULL;
END $$;
-- +goose StatementEnd

-- cairn_run_deadlines: as in 00023.
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

-- cairn_wake_due: as in 00010.
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

-- cairn_queue_timeouts: as in 00016.
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

-- cairn_workflow_pause: as in 00005.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_workflow_pause(p_name text, p_actor text, p_note text)
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

-- cairn_workflow_resume: as in 00005.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_workflow_resume(p_name text, p_actor text, p_note text)
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

-- cairn_run_retry: as in 00015.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_run_retry(p_run uuid, p_version integer, p_actor text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_run      record;
    v_target   integer;
    v_mismatch text;
    v_started  boolean;
    v_total    integer;
    v_left     integer;
    v_keys     text[];
    v_workflow record;
BEGIN
    -- The workflow's row first, FOR KEY SHARE (as sqlRunCreate): cairn_workflow_pause
    -- locks it FOR UPDATE before it holds the workflow's runs, so it waits for this
    -- retry and then holds the retried run, or this retry sees the workflow paused.
    SELECT w.paused, w.paused_by INTO v_workflow
    FROM workflows w WHERE w.name = (SELECT workflow FROM runs WHERE id = p_run) FOR KEY SHARE;
    SELECT id, workflow, version, status INTO v_run FROM runs WHERE id = p_run FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'run % not found', p_run USING ERRCODE = 'CA404';
    END IF;
    IF v_run.status NOT IN ('failed', 'canceled') THEN
        RAISE EXCEPTION 'run % is %: only a failed or canceled run can be retried', p_run, v_run.status
            USING ERRCODE = 'CAR09';
    END IF;
    v_target := coalesce(nullif(p_version, 0), v_run.version);

    IF v_target <> v_run.version THEN
        PERFORM 1 FROM workflow_versions WHERE workflow = v_run.workflow AND version = v_target;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'workflow % has no version %', v_run.workflow, v_target USING ERRCODE = 'CA404';
        END IF;
        SELECT cairn_version_mismatch(v_run.workflow, v_target, array_agg(key ORDER BY key),
                                      array_agg(array_to_string(needs, ',') ORDER BY key))
          INTO v_mismatch
          FROM steps WHERE run_id = p_run AND status = 'succeeded' AND map_parent IS NULL;
        IF v_mismatch <> '' THEN
            RAISE EXCEPTION 'run % cannot move onto version % of %: steps it keeps differ there: %',
                p_run, v_target, v_run.workflow, v_mismatch USING ERRCODE = 'CAV09';
        END IF;

        -- Lay the steps the run does not keep out from the new version.
        DELETE FROM steps s
        WHERE s.run_id = p_run AND s.status <> 'succeeded' AND s.map_parent IS NULL
          AND NOT EXISTS (SELECT 1 FROM cairn_version_layout(v_run.workflow, v_target) l WHERE l.key = s.key);
        UPDATE steps s SET needs = l.needs, max_attempts = l.max_attempts, on_exhausted = l.on_exhausted
        FROM cairn_version_layout(v_run.workflow, v_target) l
        WHERE s.run_id = p_run AND s.key = l.key AND s.status <> 'succeeded';
        INSERT INTO steps (run_id, key, status, needs, deps_remaining, max_attempts, on_exhausted)
        SELECT p_run, l.key, 'waiting', l.needs, cardinality(l.needs), l.max_attempts, l.on_exhausted
        FROM cairn_version_layout(v_run.workflow, v_target) l
        WHERE NOT EXISTS (SELECT 1 FROM steps s WHERE s.run_id = p_run AND s.key = l.key);
        DELETE FROM step_edges WHERE run_id = p_run;
        INSERT INTO step_edges (run_id, from_key, to_key)
        SELECT p_run, n, s.key FROM steps s, unnest(s.needs) AS n WHERE s.run_id = p_run AND s.map_parent IS NULL;
    END IF;

    SELECT bool_or(attempts > 0) INTO v_started FROM steps WHERE run_id = p_run;

    -- Every step not kept runs again: ready when all it needs succeeded.
    WITH reset AS (
        UPDATE steps s SET
            status = CASE WHEN d.unmet = 0 THEN 'ready' ELSE 'waiting' END,
            deps_remaining = d.unmet,
            ready_at = CASE WHEN d.unmet = 0 THEN now() END,
            counted_attempts = 0,
            last_error = CASE WHEN s.status = 'skipped' THEN NULL ELSE s.last_error END,
            started_at = NULL, finished_at = NULL,
            lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, held = false
        FROM (SELECT t.key, (SELECT count(*) FROM steps u
                             WHERE u.run_id = p_run AND u.key = ANY (t.needs) AND u.status <> 'succeeded') AS unmet
              FROM steps t WHERE t.run_id = p_run AND t.status <> 'succeeded') d
        WHERE s.run_id = p_run AND s.key = d.key
        RETURNING s.key
    )
    SELECT coalesce(array_agg(key ORDER BY key), '{}') INTO v_keys FROM reset;

    SELECT count(*), count(*) FILTER (WHERE status <> 'succeeded') INTO v_total, v_left
    FROM steps WHERE run_id = p_run;
    UPDATE runs SET status = CASE WHEN coalesce(v_started, false) THEN 'running' ELSE 'pending' END,
        version = v_target, steps_total = v_total, steps_remaining = v_left,
        error = NULL, finished_at = NULL
    WHERE id = p_run;
    PERFORM cairn_event(p_run, 'run.retried', NULL, NULL,
        jsonb_build_object('actor', p_actor, 'version', v_target, 'previous_version', v_run.version,
                           'steps', to_jsonb(v_keys)));
    IF v_left = 0 THEN
        PERFORM cairn_run_settle(p_run, 0);
    ELSIF v_workflow.paused THEN
        -- Its workflow is paused: the run waits with the workflow's other runs.
        PERFORM cairn_run_hold(p_run, 'workflow', v_workflow.paused_by, 'its workflow is paused');
    ELSE
        PERFORM cairn_wake();
    END IF;
END $$;
-- +goose StatementEnd

-- cairn_run_rerun: as in 00009.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_run_rerun(p_new uuid, p_source uuid, p_from text, p_input jsonb,
                                p_version integer, p_actor text, p_dry_run boolean)
RETURNS TABLE (reused text[], fresh text[]) LANGUAGE plpgsql AS $$
DECLARE
    v_src      record;
    v_target   integer;
    v_mismatch text;
    v_total    integer;
    v_paused   boolean;
BEGIN
    -- The workflow's row first, FOR KEY SHARE, as for a run created by its start
    -- (sqlRunCreate): a rerun in a paused workflow is created paused.
    SELECT w.paused INTO v_paused
    FROM workflows w WHERE w.name = (SELECT workflow FROM runs WHERE id = p_source) FOR KEY SHARE;
    SELECT id, workflow, version, status, input, labels INTO v_src FROM runs WHERE id = p_source FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'run % not found', p_source USING ERRCODE = 'CA404';
    END IF;
    IF v_src.status NOT IN ('succeeded', 'failed', 'canceled') THEN
        RAISE EXCEPTION 'run % is %: only a run that has ended can be rerun', p_source, v_src.status
            USING ERRCODE = 'CAR09';
    END IF;
    v_target := coalesce(nullif(p_version, 0), v_src.version);
    PERFORM 1 FROM workflow_versions WHERE workflow = v_src.workflow AND version = v_target;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'workflow % has no version %', v_src.workflow, v_target USING ERRCODE = 'CA404';
    END IF;

    CREATE TEMP TABLE IF NOT EXISTS cairn_rerun_plan (ord bigint, key text, needs text[],
        max_attempts integer, reuse boolean, output jsonb, on_exhausted text) ON COMMIT DROP;
    TRUNCATE cairn_rerun_plan;
    INSERT INTO cairn_rerun_plan (ord, key, needs, max_attempts, reuse, output, on_exhausted)
    SELECT l.ord, l.key, l.needs, l.max_attempts, false, NULL, l.on_exhausted
    FROM cairn_version_layout(v_src.workflow, v_target) l;
    PERFORM 1 FROM cairn_rerun_plan WHERE key = p_from;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'step % is not a step of version % of workflow %', p_from, v_target, v_src.workflow
            USING ERRCODE = 'CA422';
    END IF;

    -- Reused: not downstream of p_from, and succeeded in the source.
    WITH RECURSIVE down(key) AS (
        SELECT p_from
        UNION
        SELECT p.key FROM cairn_rerun_plan p JOIN down ON down.key = ANY (p.needs)
    )
    UPDATE cairn_rerun_plan p SET reuse = true, output = s.output
    FROM steps s
    WHERE s.run_id = p_source AND s.key = p.key AND s.status = 'succeeded'
      AND p.key NOT IN (SELECT key FROM down);

    IF v_target <> v_src.version THEN
        SELECT cairn_version_mismatch(v_src.workflow, v_target, array_agg(s.key ORDER BY s.key),
                                      array_agg(array_to_string(s.needs, ',') ORDER BY s.key))
          INTO v_mismatch
          FROM steps s JOIN cairn_rerun_plan p ON p.key = s.key AND p.reuse
          WHERE s.run_id = p_source;
        IF v_mismatch <> '' THEN
            RAISE EXCEPTION 'run % cannot be rerun on version % of %: steps it would reuse differ there: %',
                p_source, v_target, v_src.workflow, v_mismatch USING ERRCODE = 'CAV09';
        END IF;
    END IF;

    SELECT coalesce(array_agg(p.key ORDER BY p.ord) FILTER (WHERE p.reuse), '{}'),
           coalesce(array_agg(p.key ORDER BY p.ord) FILTER (WHERE NOT p.reuse), '{}'),
           count(*)
      INTO reused, fresh, v_total
      FROM cairn_rerun_plan p;
    IF p_dry_run THEN
        RETURN NEXT;
        RETURN;
    END IF;

    INSERT INTO runs (id, workflow, version, input, steps_total, steps_remaining, rerun_of, rerun_from_step,
                      labels, status, pause_reason)
    VALUES (p_new, v_src.workflow, v_target, coalesce(p_input, v_src.input), v_total,
            v_total - cardinality(reused), p_source, p_from, v_src.labels,
            CASE WHEN v_paused THEN 'paused' ELSE 'pending' END, CASE WHEN v_paused THEN 'workflow' END);
    INSERT INTO steps (run_id, key, status, needs, deps_remaining, max_attempts, ready_at, output, finished_at,
                       on_exhausted, held)
    SELECT p_new, p.key,
           CASE WHEN p.reuse THEN 'succeeded' WHEN d.unmet = 0 THEN 'ready' ELSE 'waiting' END,
           p.needs, CASE WHEN p.reuse THEN 0 ELSE d.unmet END, p.max_attempts,
           CASE WHEN NOT p.reuse AND d.unmet = 0 THEN now() END,
           p.output, CASE WHEN p.reuse THEN now() END,
           p.on_exhausted, v_paused AND NOT p.reuse
    FROM cairn_rerun_plan p
    CROSS JOIN LATERAL (SELECT count(*)::integer AS unmet FROM cairn_rerun_plan q
                        WHERE q.key = ANY (p.needs) AND NOT q.reuse) d;
    INSERT INTO step_edges (run_id, from_key, to_key)
    SELECT p_new, n, p.key FROM cairn_rerun_plan p, unnest(p.needs) AS n;
    PERFORM cairn_event(p_new, 'run.created', NULL, NULL,
        jsonb_build_object('workflow', v_src.workflow, 'version', v_target, 'rerun_of', p_source,
                           'from_step', p_from, 'actor', p_actor));
    IF cardinality(reused) > 0 THEN
        PERFORM cairn_event(p_new, 'step.reused', NULL, NULL,
            jsonb_build_object('steps', to_jsonb(reused), 'rerun_of', p_source));
    END IF;
    PERFORM cairn_wake();
    RETURN NEXT;
END $$;
-- +goose StatementEnd

-- cairn_run_cancel: as in 00023.
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

-- cairn_run_hold: as in 00010.
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

-- cairn_run_release: as in 00005.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_run_release(p_run uuid, p_actor text, p_note text, p_only text)
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

-- cairn_run_settle: as in 00028.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_run_settle(p_run uuid, p_done integer)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_remaining integer;
    v_status    text;
    v_failed    record;
    v_error     jsonb;
    v_handlers  jsonb;
    v_n         integer;
    v_seq       bigint;
BEGIN
    IF p_done = 0 THEN
        -- Nothing to count: the row is read and locked, not rewritten unchanged.
        SELECT steps_remaining, status INTO v_remaining, v_status FROM runs
        WHERE id = p_run AND status IN ('pending', 'running', 'paused', 'compensating')
        FOR UPDATE;
    ELSE
        UPDATE runs SET steps_remaining = greatest(steps_remaining - p_done, 0)
        WHERE id = p_run AND status IN ('pending', 'running', 'paused', 'compensating')
        RETURNING steps_remaining, status INTO v_remaining, v_status;
    END IF;
    IF v_remaining IS DISTINCT FROM 0 THEN
        RETURN;
    END IF;
    IF v_status = 'paused' THEN
        UPDATE steps SET held = false WHERE run_id = p_run AND held;
    END IF;

    IF v_status = 'compensating' THEN
        SELECT jsonb_agg(jsonb_strip_nulls(jsonb_build_object('step', key, 'phase', phase,
                   'compensates', compensates, 'error', last_error)) ORDER BY finished_at, key)
          INTO v_handlers
          FROM steps WHERE run_id = p_run AND phase <> 'main' AND status = 'failed';
        SELECT error INTO v_error FROM runs WHERE id = p_run;
        IF v_handlers IS NOT NULL THEN
            v_error := v_error || jsonb_build_object(
                'message', (v_error ->> 'message') || '; failure handler ' ||
                    (SELECT string_agg(h ->> 'step', ', ') FROM jsonb_array_elements(v_handlers) AS h) || ' failed too',
                'handlers_failed', v_handlers);
        END IF;
        UPDATE runs SET status = 'failed', finished_at = now(), error = v_error WHERE id = p_run;
        PERFORM cairn_event(p_run, 'run.failed', NULL, NULL, jsonb_strip_nulls(jsonb_build_object(
            'step', v_error ->> 'step', 'handlers_failed', v_handlers)));
        RETURN;
    END IF;

    SELECT key, last_error INTO v_failed FROM steps
    WHERE run_id = p_run AND status = 'failed' AND phase = 'main' AND map_parent IS NULL
    ORDER BY finished_at, key LIMIT 1;
    IF FOUND THEN
        v_error := jsonb_build_object('message', 'step ' || v_failed.key || ' failed',
                                      'step', v_failed.key, 'cause', v_failed.last_error);
        v_n := cairn_run_compensate(p_run);
        IF v_n > 0 THEN
            UPDATE runs SET status = 'compensating', pause_reason = NULL, error = v_error,
                steps_total = steps_total + v_n, steps_remaining = v_n
            WHERE id = p_run;
            PERFORM cairn_event(p_run, 'run.compensating', NULL, NULL, jsonb_build_object(
                'step', v_failed.key,
                'steps', (SELECT to_jsonb(array_agg(s.key ORDER BY s.phase = 'on_failure', m.finished_at DESC,
                                                                   m.key DESC, s.key))
                          FROM steps s LEFT JOIN steps m ON m.run_id = s.run_id AND m.key = s.compensates
                          WHERE s.run_id = p_run AND s.phase <> 'main')));
            PERFORM cairn_wake();
            RETURN;
        END IF;
        UPDATE runs SET status = 'failed', finished_at = now(), pause_reason = NULL, error = v_error
        WHERE id = p_run;
        PERFORM cairn_event(p_run, 'run.failed', NULL, NULL, jsonb_build_object('step', v_failed.key));
    ELSE
        -- The run.succeeded event's revision in the same write (as cairn_event).
        UPDATE runs SET status = 'succeeded', finished_at = now(), pause_reason = NULL,
            revision = revision + 1
        WHERE id = p_run RETURNING revision INTO v_seq;
        INSERT INTO events (run_id, seq, type) VALUES (p_run, v_seq, 'run.succeeded');
    END IF;
END $$;
-- +goose StatementEnd

-- cairn_child_ended: as in 00015; the child ends left to the sweeper resolved first.
SELECT cairn_child_resolve(child_id) FROM child_run_ends;
DROP TABLE child_run_ends;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_child_ended()
RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cairn_child_resolve(NEW.id);
    RETURN NULL;
END $$;
-- +goose StatementEnd

-- cairn_steps_succeed: as in 00032.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_steps_succeed(p_runs uuid[], p_keys text[], p_tokens bigint[],
                                    p_outputs text[], p_log_keys text[], p_wake boolean,
                                    OUT ords bigint[], OUT ready bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_ended     uuid[];
    v_skip_runs uuid[];
    v_skip_keys text[];
BEGIN
    WITH b AS (
        SELECT * FROM unnest(p_runs, p_keys, p_tokens, p_outputs, p_log_keys)
            WITH ORDINALITY AS b(run_id, key, token, output, log_key, ord)
    ), done AS (
        UPDATE steps s SET status = 'succeeded', output = b.output::jsonb, finished_at = now(),
            lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
        FROM b
        WHERE s.run_id = b.run_id AND s.key = b.key AND s.lease_token = b.token
          AND (s.status = 'running') IS TRUE
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
            status = CASE WHEN s.deps_remaining = dec.n AND (s.trigger_rule <> 'any_failed' OR s.deps_failed > 0)
                          THEN 'ready' ELSE s.status END,
            ready_at = CASE WHEN s.deps_remaining = dec.n THEN now() ELSE s.ready_at END
        FROM dec
        WHERE s.run_id = dec.run_id AND s.key = dec.to_key AND s.status = 'waiting'
        RETURNING s.run_id, s.key, s.status, s.deps_remaining
    ), per_run AS (
        SELECT run_id, count(*) AS n, array_agg(key ORDER BY key) AS keys,
               array_agg(attempts ORDER BY key) AS atts, array_agg(output ORDER BY key) AS outs
        FROM done GROUP BY run_id
    ), r AS (
        UPDATE runs SET revision = runs.revision + p.n,
            steps_remaining = greatest(runs.steps_remaining - p.n, 0)
        FROM per_run p WHERE runs.id = p.run_id
        RETURNING runs.id, runs.revision, p.n, runs.steps_remaining, p.keys, p.atts, p.outs
    ), ev AS (
        INSERT INTO events (run_id, seq, type, step_key, attempt, data)
        SELECT r.id, r.revision - r.n + k.ord, 'step.succeeded', k.key, k.att,
               CASE WHEN jsonb_typeof(k.output) = 'object' AND k.output ? '$blob'
                    THEN jsonb_build_object('output', k.output) ELSE '{}'::jsonb END
        FROM r CROSS JOIN LATERAL unnest(r.keys, r.atts, r.outs) WITH ORDINALITY AS k(key, att, output, ord)
    )
    SELECT (SELECT coalesce(array_agg(d.ord), '{}') FROM done d),
           (SELECT coalesce(array_agg(r.id ORDER BY r.id), '{}') FROM r WHERE r.steps_remaining = 0),
           (SELECT count(*) FROM deps WHERE deps.status = 'ready'),
           (SELECT coalesce(array_agg(deps.run_id ORDER BY deps.run_id, deps.key), '{}') FROM deps
             WHERE deps.status = 'waiting' AND deps.deps_remaining = 0),
           (SELECT coalesce(array_agg(deps.key ORDER BY deps.run_id, deps.key), '{}') FROM deps
             WHERE deps.status = 'waiting' AND deps.deps_remaining = 0)
    INTO ords, v_ended, ready, v_skip_runs, v_skip_keys;

    PERFORM cairn_run_settle(x, 0) FROM unnest(v_ended) AS x;
    FOR i IN 1 .. coalesce(cardinality(v_skip_runs), 0) LOOP
        PERFORM cairn_run_settle(v_skip_runs[i], cairn_step_skip(v_skip_runs[i], v_skip_keys[i], 'no_upstream_failed', NULL));
    END LOOP;
    IF ready > 0 AND p_wake THEN
        PERFORM cairn_wake();
    END IF;
END $$;
-- +goose StatementEnd

DROP FUNCTION cairn_queue_timeout_next();
DROP FUNCTION cairn_wake_next();
DROP FUNCTION cairn_runs_try_share(uuid);
DROP FUNCTION cairn_runs_lock(uuid[]);
DROP FUNCTION cairn_runs_order(uuid[]);

DROP TABLE step_history;
