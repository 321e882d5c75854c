-- Run control: cancel, pause and resume (of a run or a whole workflow), deadlines,
-- retry and rerun, and the locks they take. Go callers: catalog/run.go,
-- catalog/operation.go (bulk operations), catalog/retry.go, catalog/workflow.go,
-- catalog/flow.go (deadlines).
--
-- The lock order: every transaction that writes a run takes, in this order (a
-- function body written before this folder existed may call it "the lock order at
-- the top of migration 00023" or "the order of 00042", which extended it):
--   0. the rows of workflows it reads or pauses (FOR KEY SHARE to create, retry or
--      rerun a run; FOR UPDATE to pause or resume the workflow);
--   1. the advisory locks of the runs it writes (cairn_runs_order): a run's
--      ancestors (parent_id, up to the root) before it, shared, and otherwise by
--      depth, then descending ID. Shared for a writer of a run's steps
--      (cairn_runs_share: finishers, suspends, resolves, decisions, signals, map
--      expansions, the sweepers, a rerun's source); exclusive for cancel, a
--      deadline, pause, resume and retry (cairn_runs_lock, cairn_run_lock). A
--      writer of a child run so holds its parent's lock when the child's end
--      resolves the parent's step (runs_child_ended), and a parent's cancel, pause
--      or resume, holding the parent's lock exclusively, never meets a writer of its
--      children in a circle;
--   2. the run's steps it writes, in key order (the finishers lock theirs by key; a
--      claim skips locked steps);
--   3. the run's row (FOR NO KEY UPDATE where it writes no key). A child run that
--      ends then resolves its parent's step only if the parent's step and row can be
--      had at once; else the wake sweeper does it in a transaction of its own
--      (cairn_child_ended, child_run_ends).
-- A run's creation (sqlRunCreate, cairn_run_rerun, a child's) of a namespace with a
-- runs_per_minute quota takes the namespace's advisory lock after the workflow's
-- row (0) and its parent's or source's locks, and then only inserts new rows
-- (cairn_run_quota, namespaces.sql): its holder waits for no one's lock.
-- Before all of these, a received event (catalog/received_event.go) takes the
-- advisory lock of its name, shared, then those of its triggers' flow keys
-- (singleton, debounce, batch: catalog/event_flow.go), exclusive, each once, in the
-- order of their names; the event flow firer holds rows of event_flow_pending
-- and only tries those keys' locks, never waiting for them.
-- A transaction that takes several runs' exclusive locks takes them all first, in
-- the order of 1 (cairn_runs_lock over the set: deadlines, a workflow's pause, a
-- bulk operation's batch). The sweepers of leases, waits and queue timeouts end one
-- step a transaction (cairn_sweep_next, cairn_wake_next, cairn_queue_timeout_next),
-- trying the run's locks without waiting: one run's locks, never a run's row while
-- waiting for another run's step. A claim takes no advisory lock: it skips locked
-- steps and then only waits for run rows, which everyone takes last. No row that
-- names a busy run share-locks it: signals, runs.parent_id and rerun_of, span_outbox
-- and run_trees have no foreign key to runs (migration 00051 says why; the retention
-- reaper, catalog/retention.go, deletes or clears them with their run). catalog
-- TestLockOrderStress runs every kind of writer at once and counts no deadlock.

-- cairn_runs_order lists the runs p_runs and their ancestors in the lock order
-- (above): by depth (a root run is at 0), then by descending ID. given is true for
-- the runs of p_runs (false for an ancestor only). A run that does not exist is
-- listed at depth 0 (its lock guards its creation as well). The bound on the depth
-- costs nothing: a parent is always created before its child.
CREATE OR REPLACE FUNCTION cairn_runs_order(p_runs uuid[])
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

-- cairn_run_lock takes run p_run's advisory lock, exclusive, after its ancestors',
-- shared (cairn_runs_lock), until the end of the transaction.
CREATE OR REPLACE FUNCTION cairn_run_lock(p_run uuid)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cairn_runs_lock(ARRAY[p_run]);
END $$;

-- cairn_run_control_lock takes the locks of run p_run in the order at the top of
-- this file (its advisory lock, exclusive; then its steps that are not finished or
-- are held, in key order) for an operator's pause or resume, which call it before
-- cairn_run_pause or cairn_run_resume (they lock the steps, unordered, then the
-- run's row): a pause or a resume of a run whose steps are finishing waits for the
-- finishing batches in flight, and new ones wait for it, instead of waiting for a
-- finisher in a circle (catalog TestPauseWhileStepsFinish). It returns true, so
-- that a statement can take the locks in its WHERE clause before it writes. A run
-- paused or resumed with its parent (runs_children_follow) is not: that trigger
-- holds the parent's row already.
CREATE OR REPLACE FUNCTION cairn_run_control_lock(p_run uuid)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cairn_run_lock(p_run);
    PERFORM 1 FROM steps
    WHERE run_id = p_run AND (status IN ('waiting', 'ready', 'running', 'suspended') OR held)
    ORDER BY key FOR UPDATE;
    RETURN true;
END $$;

-- cairn_runs_share takes the advisory lock of each run in p_runs, shared, and those
-- of their ancestors, until the end of the transaction, in the order of
-- cairn_runs_order. It returns true, so that a statement can take the locks in its
-- WHERE clause before it writes.
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

-- cairn_runs_lock takes the advisory lock of each run in p_runs, exclusive, and
-- those of their ancestors, shared (exclusive when they are in p_runs too), until
-- the end of the transaction, in the order of cairn_runs_order. It returns true.
CREATE OR REPLACE FUNCTION cairn_runs_lock(p_runs uuid[])
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

-- cairn_runs_try_share takes the shared advisory locks of run p_run and its
-- ancestors (cairn_runs_share's) without waiting: false, having taken only some,
-- when one of them is held exclusively. A sweeper that locked one of the run's
-- steps first (SKIP LOCKED: it never waits for them) takes them so, and gives up
-- the step when it cannot.
CREATE OR REPLACE FUNCTION cairn_runs_try_share(p_run uuid)
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

-- cairn_run_cancel cancels a run: its waiting, ready, running and suspended steps
-- become canceled (running attempts canceled, their leases revoked so a late
-- completion is fenced out), its held steps released, and the dispatchers are told
-- on channel cairn_cancel (run.canceled with p_reason). Raises CA404 for no such
-- run, CA409 for a run that has ended. It takes its locks in the lock order above;
-- its row FOR NO KEY UPDATE (it writes no key): FOR UPDATE waited for every
-- transaction that had inserted a row referring to the run (events, attempts, a
-- child run), and those may wait for this one's advisory lock.
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

-- cairn_run_deadlines fails up to p_limit unended runs whose deadline has passed,
-- as cairn_run_cancel cancels one (its running attempts end canceled, its unfinished
-- steps are canceled, dispatchers are told on cairn_cancel), but the run fails:
-- error {"message", "cause": {"code": "deadline_exceeded"}}, run.failed {"reason":
-- "deadline_exceeded"}. The earliest deadlines first; the exclusive locks of every
-- run it fails are taken first, together, in the lock order above (one run after
-- the other, a run's lock could be taken after its child's). Returns how many it
-- failed.
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

-- cairn_run_pause pauses a run at an operator's request. A pending or running run is
-- paused (true). A paused run stays so and nothing is written (false), except that a
-- run paused by its workflow is from then on paused by the operator too (true, one
-- more run.paused): the workflow's resume no longer releases it. Raises CA404 for no
-- such run, CAR09 for a run that has ended.
CREATE OR REPLACE FUNCTION cairn_run_pause(p_run uuid, p_actor text, p_note text)
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

-- cairn_run_hold pauses a pending or running run for p_kind (run, workflow): its
-- unfinished steps are held (suspended ones too: the wake sweeper leaves them while
-- the run is paused), the run is paused, and run.paused records the actor and the
-- operator's note. Returns false, and writes nothing, when the run is not pending or
-- running once its row is locked. The caller has checked that it exists.
-- Its row is locked FOR NO KEY UPDATE, as cairn_run_cancel's.
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

-- cairn_run_release resumes a paused run: its steps are released and it is running
-- again (pending if no step ever started); run.resumed records the actor, the note
-- and the pause_reason it had. Raises CAR09 when the run is not paused once its row
-- is locked, or (p_only given) is paused for another reason: the caller's
-- transaction, or its subtransaction, then undoes the steps' release.
-- Its row is locked FOR NO KEY UPDATE, as cairn_run_cancel's.
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

-- cairn_run_resume releases a paused run, whatever paused it. Raises CA404 for no
-- such run, CAR09 for a run that is not paused.
CREATE OR REPLACE FUNCTION cairn_run_resume(p_run uuid, p_actor text, p_note text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM runs WHERE id = p_run;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'run % not found', p_run USING ERRCODE = 'CA404';
    END IF;
    PERFORM cairn_run_release(p_run, p_actor, p_note, NULL);
END $$;

-- cairn_workflow_pause pauses a workflow: it is marked paused (by p_actor, now; a
-- workflow paused already keeps who and when), every pending or running run of it
-- is paused (pause_reason workflow), and runs created from now on start paused.
-- Returns how many runs it paused. Raises CA404 for no such workflow.
--
-- The workflow's row is locked FOR UPDATE first: run creation reads paused FOR KEY
-- SHARE (sqlRunCreate), so a run being created either commits before this scan
-- (which then pauses it) or reads paused = true.
--
-- The runs' advisory locks are taken first, all together, in the lock order above,
-- then each run's steps (cairn_run_control_lock) before its row.
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

-- cairn_workflow_resume resumes a workflow: it is no longer paused, and the runs its
-- pause held (pause_reason workflow) are released; runs paused one by one, or parked
-- by on_exhausted, stay paused. Resuming a workflow that is not paused changes
-- nothing. Returns how many runs it released. Raises CA404 for no such workflow.
--
-- The runs' advisory locks are taken first, all together, in the lock order above,
-- then each run's steps (cairn_run_control_lock) before its row.
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

-- cairn_version_layout returns the steps a run of a version starts with, in the
-- definition's order (ord, from 1): key, needs, max_attempts, on_exhausted. The one
-- place that reads the layout arrays for retry and rerun: a column added to the
-- layout is read here and written where these functions insert or update steps.
CREATE OR REPLACE FUNCTION cairn_version_layout(p_workflow text, p_version integer)
RETURNS TABLE (ord bigint, key text, needs text[], max_attempts integer, on_exhausted text)
LANGUAGE sql STABLE AS $$
    SELECT s.ord, s.k, coalesce(string_to_array(nullif(s.n, ''), ','), '{}'), s.m, coalesce(s.o, 'fail')
    FROM workflow_versions v,
         unnest(v.step_keys, v.step_needs, v.step_max_attempts, v.step_on_exhausted) WITH ORDINALITY AS s(k, n, m, o, ord)
    WHERE v.workflow = p_workflow AND v.version = p_version
$$;

-- cairn_condition_layout returns, per step of a version, the rest of its layout:
-- its trigger rule, whether it has a condition, its compensation's max_attempts
-- (NULL: none). Versions deployed before conditions existed have none of them.
CREATE OR REPLACE FUNCTION cairn_condition_layout(p_workflow text, p_version integer)
RETURNS TABLE (key text, trigger_rule text, has_when boolean, compensate_attempts integer)
LANGUAGE sql STABLE AS $$
    SELECT s.k, coalesce(nullif(s.a, ''), 'all_succeeded'), coalesce(s.w, false), nullif(s.c, 0)
    FROM workflow_versions v,
         unnest(v.step_keys, v.step_after, v.step_when, v.step_compensate) AS s(k, a, w, c)
    WHERE v.workflow = p_workflow AND v.version = p_version
$$;

-- cairn_version_mismatch names the steps of p_keys (steps a run keeps, with their
-- needs p_needs) that version p_version of p_workflow lacks or gives other needs
-- (compared as sets): '' when it has them all. The compatibility rule of retry and
-- rerun, stated once.
CREATE OR REPLACE FUNCTION cairn_version_mismatch(p_workflow text, p_version integer, p_keys text[], p_needs text[])
RETURNS text LANGUAGE sql STABLE AS $$
    SELECT coalesce(string_agg(
               CASE WHEN l.key IS NULL THEN k.key || ' (not in version ' || p_version || ')'
                    ELSE k.key || ' (needs ' || coalesce(nullif(array_to_string(k.needs, ', '), ''), 'nothing')
                         || ' in the run, ' || coalesce(nullif(array_to_string(l.needs, ', '), ''), 'nothing')
                         || ' in version ' || p_version || ')' END,
               ', ' ORDER BY k.key), '')
    FROM (SELECT u.key, string_to_array(nullif(u.needs, ''), ',') AS needs
          FROM unnest(p_keys, p_needs) AS u(key, needs)) k
    LEFT JOIN cairn_version_layout(p_workflow, p_version) l ON l.key = k.key
    WHERE l.key IS NULL
       OR NOT (coalesce(k.needs, '{}') @> l.needs AND l.needs @> coalesce(k.needs, '{}'))
$$;

-- cairn_run_retry runs a failed or canceled run again, in place, under its row lock
-- (of concurrent retries exactly one takes effect; the others find it running and
-- raise CAR09). Succeeded steps and their outputs are kept and never run again;
-- failed, canceled and skipped steps become ready (no unmet needs) or waiting, with
-- a fresh attempt budget (counted_attempts 0; attempt numbers go on, the attempts
-- stay), their checkpoint kept (a step resumes from it) and, for a skipped step,
-- the "upstream did not succeed" error cleared. The run is running again (pending
-- when no step of it ever started), its error and finished_at cleared.
--
-- With p_version (0: stay on the run's version) the run moves onto that version of
-- its workflow if every kept step exists there with the same key and needs (as
-- sets), else CAV09 names the steps; the steps it does not keep are laid out anew
-- from that version (needs and max_attempts updated, steps new in it added, steps
-- it lacks removed with their attempts) and the DAG's edges rebuilt.
--
-- One event run.retried {actor, version, previous_version, steps: the keys made
-- runnable}; dispatchers are woken. A run left with no step to run (the version
-- dropped its failed steps) ends at once (cairn_run_settle).
--
-- A map's instances are not steps of the version's
-- layout: a retry onto another version keeps them (the map step takes them up again),
-- does not compare them with the new version, and draws no edges to them.
--
-- The run's locks are taken in the lock order above, and the steps it replaces are
-- kept in step_history first, with the try they belonged to; its run.retried event
-- names the new try.
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
        INSERT INTO steps (run_id, key, status, needs, deps_remaining, max_attempts, on_exhausted, quota_ns)
        SELECT p_run, l.key, 'waiting', l.needs, cardinality(l.needs), l.max_attempts, l.on_exhausted,
               nullif(cairn_namespace(v_run.workflow), 'default')
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

-- cairn_run_rerun makes run p_new from finished run p_source: the same workflow,
-- on p_version (0: the source's version), with input p_input (NULL: the source's).
-- The steps are that version's; each step not downstream of p_from (neither p_from
-- nor a transitive dependent of it, in that version's DAG) that succeeded in the
-- source is carried over by reference: succeeded, with the source's output as
-- stored (the same inline value or $blob reference; nothing is copied), without an
-- attempt. The others run fresh. A reused step must have the same needs in the
-- version as in the source (CAV09 names those that differ); p_from must be a step
-- of the version (CA422); the source must have ended (CAR09) under a share lock, so
-- that a retry of it waits.
-- A rerun is a new run of its namespace: over the namespace's runs_per_minute quota
-- it is refused (CA429, cairn_run_quota), as a start is.
--
-- It returns the plan: the keys reused and the keys to run, in the version's order.
-- With p_dry_run nothing is written. Otherwise the new run's events are run.created
-- {workflow, version, rerun_of, from_step, actor} and, when steps are reused,
-- step.reused {steps, rerun_of}; dispatchers are woken. The run.created event fires
-- events_run_relayout (triggers.sql), which adds conditions, trigger rules and
-- compensations to the steps laid out here.
--
-- The source's shared lock is taken before its row, and the steps it reuses keep
-- the times they started and finished at in the source, so that the compensations
-- of a failed rerun (reverse completion order) undo them in the right order.
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

    -- Its namespace's runs_per_minute quota (namespaces.sql), as for a run started.
    PERFORM cairn_run_quota(v_src.workflow);
    INSERT INTO runs (id, workflow, version, input, steps_total, steps_remaining, rerun_of, rerun_from_step,
                      labels, status, pause_reason)
    VALUES (p_new, v_src.workflow, v_target, coalesce(p_input, v_src.input), v_total,
            v_total - cardinality(reused), p_source, p_from, v_src.labels,
            CASE WHEN v_paused THEN 'paused' ELSE 'pending' END, CASE WHEN v_paused THEN 'workflow' END);
    INSERT INTO steps (run_id, key, status, needs, deps_remaining, max_attempts, ready_at, output, started_at,
                       finished_at, on_exhausted, held, quota_ns)
    SELECT p_new, p.key,
           CASE WHEN p.reuse THEN 'succeeded' WHEN d.unmet = 0 THEN 'ready' ELSE 'waiting' END,
           p.needs, CASE WHEN p.reuse THEN 0 ELSE d.unmet END, p.max_attempts,
           CASE WHEN NOT p.reuse AND d.unmet = 0 THEN now() END,
           p.output, p.started_at, p.finished_at,
           p.on_exhausted, v_paused AND NOT p.reuse, nullif(cairn_namespace(v_src.workflow), 'default')
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
