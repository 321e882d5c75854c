-- Waits: a step that suspends (sleep, signal, approval, callback) and what ends its
-- wait: the wake sweeper (cairn_wake_next), a signal (cairn_signal_send), an
-- approver's decision (cairn_step_decide), a callback (cairn_callback_complete), a
-- condition decided in Go (cairn_condition_decide). A suspended step ends through
-- cairn_step_resolve (steps.sql). cairn_wake is the NOTIFY that tells idle
-- dispatchers to poll. Go callers: catalog/wait.go, catalog/approval.go,
-- catalog/condition.go.

-- cairn_wake wakes idle dispatchers: steps may have become ready. A hint (they poll
-- too); notifications of one transaction with the same payload are sent once.
CREATE OR REPLACE FUNCTION cairn_wake()
RETURNS void LANGUAGE sql AS $$
    SELECT pg_notify('cairn_steps', '');
$$;

-- cairn_step_suspend: a running step, fenced by its lease token (false, nothing
-- written, when the token is not its current lease), gives up its lease and waits:
--   p_kind        sleep, signal, approval, callback or event (a wait_for_event
--                 step, whose buffered events catalog/event.go looks at first);
--   p_until       a sleep's end (required for sleep);
--   p_name        a signal's or an event's name (required for signal and event);
--   p_timeout_at  when the wait gives up (NULL: never);
--   p_on_timeout  fail (default) or continue.
-- Its attempt ends succeeded (it did its part: start the wait) and the step is
-- suspended (step.suspended with the wait). A signal step that finds a buffered
-- signal of its name takes the oldest at once and succeeds without suspending (no
-- step.suspended); a wait already due is woken at once (cairn_step_wake). A signal
-- step first takes a transaction-scoped advisory lock on (run, signal name), as
-- cairn_signal_send does, so that a signal sent while the step suspends is either
-- found here or finds the step waiting: one of them sees the other's work.
-- Raises CA422 for a bad kind, a missing until or name, or a bad on_timeout.
CREATE OR REPLACE FUNCTION cairn_step_suspend(p_run uuid, p_key text, p_token bigint, p_kind text,
                                   p_until timestamptz, p_name text, p_timeout_at timestamptz,
                                   p_on_timeout text)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_attempt integer;
    v_signal  record;
BEGIN
    IF p_kind IS NULL OR p_kind NOT IN ('sleep', 'signal', 'approval', 'callback', 'event') THEN
        RAISE EXCEPTION 'wait kind % is not sleep, signal, approval, callback or event', p_kind USING ERRCODE = 'CA422';
    END IF;
    IF p_kind = 'sleep' AND p_until IS NULL THEN
        RAISE EXCEPTION 'a sleep needs its end (until)' USING ERRCODE = 'CA422';
    END IF;
    IF p_kind IN ('signal', 'event') AND p_name IS NULL THEN
        RAISE EXCEPTION 'a % wait needs the %''s name', p_kind, p_kind USING ERRCODE = 'CA422';
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

-- cairn_step_wake ends the wait of a suspended step that is due, if it is: a sleep
-- whose time has come succeeds with {"slept_until": …}; a wait whose timeout_at has
-- passed fails (code timeout) or, with on_timeout continue, succeeds with a null
-- output. Returns whether it woke the step. The caller holds the step's row lock.
CREATE OR REPLACE FUNCTION cairn_step_wake(p_run uuid, p_key text)
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

-- cairn_wake_next is the wake sweeper's step: it ends one due wait (a sleep's end or
-- a timeout: cairn_step_wake) of the earliest due ones that no other sweeper holds,
-- or resolves the parent's step of a child run's end left in child_run_ends (see
-- cairn_child_ended, triggers.sql), in the lock order: the run's shared lock, tried
-- without waiting (a run being canceled, paused or retried is left to the next
-- round), then the step, then the run's row. Held steps (of a paused run) are not
-- woken: they wake once it resumes. 1 when it did one, 0 when none is due, -1 when
-- the due ones are busy; the caller makes one transaction of each call
-- (catalog.WakeDue).
CREATE OR REPLACE FUNCTION cairn_wake_next()
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

-- cairn_signal_send delivers a signal p_name with p_payload to run p_run, sent by
-- p_actor. With p_idempotency_key, a repeat (same run, name and key) is the same
-- signal: nothing is written and its seq is returned with duplicate true. Otherwise
-- the signal is stored (signal.received with actor, name, seq) and, when a step of
-- the run waits for that name, the oldest buffered signal of that name (this one,
-- unless older ones wait) completes it (cairn_step_resolve); else it stays buffered.
-- It takes the advisory lock on (run, signal name) first, as cairn_step_suspend
-- does (see there).
-- Returns the signal's seq, the step it completed (NULL while buffered) and
-- whether it was a repeat. Raises CA404 for no such run, CA409 for a run that has
-- ended. The caller checks that the run's version has a signal step of that name.
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

-- cairn_approval_suspend: a running approval step, fenced by its lease token (false,
-- nothing written, when the token is not its lease), suspends (cairn_step_suspend,
-- wait_kind approval) with its rule: p_required distinct approvals of tokens whose
-- role is in p_roles (or admin). Raises CA422 for a bad rule.
CREATE OR REPLACE FUNCTION cairn_approval_suspend(p_run uuid, p_key text, p_token bigint, p_required integer,
                                       p_roles text[], p_timeout_at timestamptz, p_on_timeout text)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    IF p_required IS NULL OR p_required < 1 THEN
        RAISE EXCEPTION 'an approval needs required >= 1, not %', p_required USING ERRCODE = 'CA422';
    END IF;
    IF p_roles IS NULL OR cardinality(p_roles) = 0 OR NOT p_roles <@ ARRAY['operator', 'admin'] THEN
        RAISE EXCEPTION 'approval roles % must be operator or admin', p_roles USING ERRCODE = 'CA422';
    END IF;
    -- The rule first: cairn_step_suspend may wake the step at once (a due timeout).
    UPDATE steps SET approval_required = p_required, approval_roles = p_roles, approvals = 0
    WHERE run_id = p_run AND key = p_key AND lease_token = p_token AND status = 'running';
    IF NOT FOUND THEN
        RETURN false; -- lease lost
    END IF;
    RETURN cairn_step_suspend(p_run, p_key, p_token, 'approval', NULL, NULL, p_timeout_at, p_on_timeout);
END $$;

-- cairn_step_decide records the decision (approved or rejected) of approver
-- p_approver, whose token has role p_role (p_named: the token has a name of its
-- own), on approval step p_key of run p_run. A step that does not wait for approval
-- is CAR09 naming its state (rejected, failed, succeeded, canceled; and its run's
-- state when the run has ended), for every caller, an approver who decided before
-- included; only while the step waits is a repeat answered with the first decision
-- (counted false, nothing written). Then the role must be one of the step's roles
-- or admin (CA403), and an approval of a step that needs more than one approver
-- from a token without a name is CA403 too: such tokens are told apart by their
-- role only. The decision is recorded with an event (step.approved or
-- step.rejected, naming the actor); the required-th approval ends the step
-- succeeded with {"approved_by": [{name, comment, input, at}…]} (in order), a
-- rejection ends it failed, terminal, code rejected. Concurrent decisions
-- serialize on the step's row. CA404 for no such step.
CREATE OR REPLACE FUNCTION cairn_step_decide(p_run uuid, p_key text, p_approver text, p_role text, p_decision text,
                                  p_comment text, p_input jsonb, p_named boolean)
RETURNS TABLE (decision text, counted boolean) LANGUAGE plpgsql AS $$
DECLARE
    s         record;
    v_run     text;
    v_prior   text;
    v_output  jsonb;
BEGIN
    IF p_decision IS NULL OR p_decision NOT IN ('approved', 'rejected') THEN
        RAISE EXCEPTION 'decision % is not approved or rejected', p_decision USING ERRCODE = 'CA422';
    END IF;
    SELECT st.status, st.wait_kind, st.attempts, st.approval_required, st.approval_roles, st.approvals,
           st.last_error->>'code' AS error_code INTO s
      FROM steps st WHERE st.run_id = p_run AND st.key = p_key FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'step % of run % not found', p_key, p_run USING ERRCODE = 'CA404';
    END IF;
    IF s.status <> 'suspended' OR s.wait_kind IS DISTINCT FROM 'approval' THEN
        SELECT r.status INTO v_run FROM runs r WHERE r.id = p_run;
        RAISE EXCEPTION 'step % of run % was decided already or no longer waits for approval: it is %', p_key, p_run,
            CASE WHEN s.status = 'suspended' THEN 'waiting for a ' || s.wait_kind
                 WHEN s.status = 'failed' AND s.error_code = 'rejected' THEN 'failed (rejected)'
                 WHEN s.status = 'failed' THEN 'failed (' || coalesce(s.error_code, 'error') || ')'
                 ELSE s.status END
            || CASE WHEN v_run IN ('succeeded', 'failed', 'canceled') THEN ', and its run has ended (' || v_run || ')' ELSE '' END
            USING ERRCODE = 'CAR09';
    END IF;
    SELECT a.decision INTO v_prior FROM approvals a
     WHERE a.run_id = p_run AND a.step_key = p_key AND a.attempt = s.attempts AND a.approver = p_approver;
    IF FOUND THEN
        RETURN QUERY SELECT v_prior, false;
        RETURN;
    END IF;
    IF p_role IS DISTINCT FROM 'admin' AND NOT (p_role = ANY (s.approval_roles)) THEN
        RAISE EXCEPTION 'step % may be decided by the roles %, not %', p_key,
            array_to_string(s.approval_roles || '{admin}'::text[], ', '), coalesce(p_role, 'none')
            USING ERRCODE = 'CA403';
    END IF;
    IF p_decision = 'approved' AND s.approval_required > 1 AND p_named IS NOT TRUE THEN
        RAISE EXCEPTION 'step % needs % distinct approvers, and a token without a name (this one acts as "%") cannot be told apart from another person''s: approve with a named token (CAIRN_TOKENS role:name:token)',
            p_key, s.approval_required, p_approver USING ERRCODE = 'CA403';
    END IF;

    INSERT INTO approvals (run_id, step_key, attempt, approver, decision, comment, input)
    VALUES (p_run, p_key, s.attempts, p_approver, p_decision, coalesce(p_comment, ''), p_input);

    IF p_decision = 'rejected' THEN
        PERFORM cairn_event(p_run, 'step.rejected', p_key, s.attempts,
            jsonb_build_object('actor', p_approver, 'comment', coalesce(p_comment, '')));
        PERFORM cairn_step_resolve(p_run, p_key, 'failed', NULL,
            jsonb_build_object('message',
                format('rejected by %s', p_approver) || coalesce(': ' || nullif(p_comment, ''), ''),
                'code', 'rejected', 'rejected_by', p_approver, 'comment', coalesce(p_comment, '')),
            'rejected');
    ELSE
        UPDATE steps SET approvals = approvals + 1 WHERE run_id = p_run AND key = p_key;
        PERFORM cairn_event(p_run, 'step.approved', p_key, s.attempts,
            jsonb_build_object('actor', p_approver, 'comment', coalesce(p_comment, ''),
                               'approvals', s.approvals + 1, 'required', s.approval_required));
        IF s.approvals + 1 >= s.approval_required THEN
            SELECT jsonb_build_object('approved_by', jsonb_agg(jsonb_build_object(
                       'name', a.approver, 'comment', a.comment, 'input', a.input, 'at', a.created_at)
                       ORDER BY a.created_at, a.approver))
              INTO v_output
              FROM approvals a
             WHERE a.run_id = p_run AND a.step_key = p_key AND a.attempt = s.attempts AND a.decision = 'approved';
            PERFORM cairn_step_resolve(p_run, p_key, 'succeeded', v_output, NULL, 'approved');
        END IF;
    END IF;
    RETURN QUERY SELECT p_decision, true;
END $$;

-- cairn_callback_take: step p_key of run p_run, just suspended for its callback,
-- takes the callback kept for its attempt, if any (cairn_step_resolve, reason
-- callback). Returns whether there was one.
CREATE OR REPLACE FUNCTION cairn_callback_take(p_run uuid, p_key text)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    s record;
BEGIN
    SELECT st.callback_outcome, st.callback_output, st.callback_error INTO s
      FROM steps st
     WHERE st.run_id = p_run AND st.key = p_key AND st.status = 'suspended' AND st.wait_kind = 'callback'
       AND st.callback_attempt = st.attempts
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    UPDATE steps SET callback_output = NULL, callback_error = NULL
    WHERE run_id = p_run AND key = p_key;
    PERFORM cairn_step_resolve(p_run, p_key, s.callback_outcome, s.callback_output, s.callback_error, 'callback');
    RETURN true;
END $$;

-- cairn_callback_claim: the request p_holder takes the callback of attempt
-- p_attempt of step p_key of run p_run for p_ttl, before it reads its body, so that
-- a concurrent second request is refused before it writes anything. The step must
-- wait for that attempt's callback as cairn_callback_complete takes it (suspended
-- for it, or still running that attempt with no callback kept): CAR09 naming its
-- state otherwise, CA404 for no such step. A claim another request holds for the
-- same attempt and that has not lapsed (callback_claims.until: a server that died
-- mid-upload holds no step forever) is a CAR09 too: nothing is written. Lock order:
-- the step (key share), then its claim.
CREATE OR REPLACE FUNCTION cairn_callback_claim(p_run uuid, p_key text, p_attempt integer, p_holder uuid, p_ttl interval)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    s record;
BEGIN
    SELECT st.status, st.wait_kind, st.attempts, st.callback_attempt INTO s
      FROM steps st WHERE st.run_id = p_run AND st.key = p_key FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'step % of run % not found', p_key, p_run USING ERRCODE = 'CA404';
    END IF;
    IF NOT ((s.status = 'suspended' AND s.wait_kind = 'callback' AND s.attempts = p_attempt)
            OR (s.status = 'running' AND s.attempts = p_attempt AND s.callback_attempt IS DISTINCT FROM p_attempt)) THEN
        RAISE EXCEPTION 'step % no longer waits for the callback of attempt %: it is %, attempt %', p_key, p_attempt,
            CASE WHEN s.status = 'suspended' THEN 'waiting for a ' || s.wait_kind
                 WHEN s.status = 'running' AND s.callback_attempt = p_attempt THEN 'running, with a callback kept for it already'
                 ELSE s.status END, s.attempts
            USING ERRCODE = 'CAR09';
    END IF;
    INSERT INTO callback_claims AS c (run_id, step_key, attempt, holder, until)
    VALUES (p_run, p_key, p_attempt, p_holder, clock_timestamp() + p_ttl)
    ON CONFLICT (run_id, step_key) DO UPDATE
       SET attempt = EXCLUDED.attempt, holder = EXCLUDED.holder, until = EXCLUDED.until
     WHERE c.until < clock_timestamp() OR c.attempt <> EXCLUDED.attempt;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'step % is receiving another callback for attempt % at this moment: this one was not read',
            p_key, p_attempt USING ERRCODE = 'CAR09';
    END IF;
END $$;

-- cairn_callback_complete ends step p_key of run p_run, suspended for the callback
-- of its attempt p_attempt: succeeded with p_output or failed (terminal) with
-- p_error (cairn_step_resolve, reason callback); it returns false. While that
-- attempt still runs (its function has handed out the URL but not yet answered
-- {"$suspend": …}), the callback is kept on the step (step.callback_received) and
-- applied when it suspends (cairn_callback_take); it returns true. CAR09 when the
-- step does not wait for that attempt's callback (it was completed, timed out,
-- canceled, runs again, or a callback is kept already): nothing is written. CA404
-- for no such step.
CREATE OR REPLACE FUNCTION cairn_callback_complete(p_run uuid, p_key text, p_attempt integer, p_outcome text,
                                        p_output jsonb, p_error jsonb)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    s record;
BEGIN
    IF p_outcome IS NULL OR p_outcome NOT IN ('succeeded', 'failed') THEN
        RAISE EXCEPTION 'cairn_callback_complete: outcome % is not succeeded or failed', p_outcome
            USING ERRCODE = 'CA400';
    END IF;
    SELECT st.status, st.wait_kind, st.attempts, st.callback_attempt INTO s
      FROM steps st WHERE st.run_id = p_run AND st.key = p_key FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'step % of run % not found', p_key, p_run USING ERRCODE = 'CA404';
    END IF;
    IF s.status = 'suspended' AND s.wait_kind = 'callback' AND s.attempts = p_attempt THEN
        PERFORM cairn_step_resolve(p_run, p_key, p_outcome, p_output, p_error, 'callback');
        RETURN false;
    END IF;
    IF s.status = 'running' AND s.attempts = p_attempt AND s.callback_attempt IS DISTINCT FROM p_attempt THEN
        UPDATE steps SET callback_attempt = p_attempt, callback_outcome = p_outcome,
            callback_output = p_output, callback_error = p_error
        WHERE run_id = p_run AND key = p_key;
        PERFORM cairn_event(p_run, 'step.callback_received', p_key, p_attempt,
            jsonb_build_object('outcome', p_outcome));
        RETURN true;
    END IF;
    RAISE EXCEPTION 'step % of run % no longer waits for the callback of attempt % (it is %, attempt %)',
        p_key, p_run, p_attempt, s.status, s.attempts USING ERRCODE = 'CAR09';
END $$;

-- cairn_condition_decide writes the decision on a ready step's condition (when), taken
-- in Go under the step's row lock: p_error set, the expression failed and the step
-- fails (last_error p_error, step.failed, dependents settled); else p_pass true
-- makes it claimable, false skips it (condition_false). Returns false, writing
-- nothing, when the step no longer waits for a decision.
CREATE OR REPLACE FUNCTION cairn_condition_decide(p_run uuid, p_key text, p_pass boolean, p_error jsonb)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM steps
     WHERE run_id = p_run AND key = p_key AND status = 'ready' AND condition = 'pending' AND NOT held
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF p_error IS NOT NULL THEN
        UPDATE steps SET status = 'failed', condition = 'error', last_error = p_error, finished_at = now()
        WHERE run_id = p_run AND key = p_key;
        PERFORM cairn_event(p_run, 'step.failed', p_key, NULL, jsonb_build_object('error', p_error));
        PERFORM cairn_run_settle(p_run, 1 + cairn_skip_dependents(p_run, p_key));
    ELSIF p_pass THEN
        UPDATE steps SET condition = 'true' WHERE run_id = p_run AND key = p_key;
        PERFORM cairn_wake();
    ELSE
        UPDATE steps SET condition = 'false' WHERE run_id = p_run AND key = p_key;
        PERFORM cairn_run_settle(p_run, cairn_step_skip(p_run, p_key, 'condition_false', NULL));
    END IF;
    RETURN true;
END $$;
