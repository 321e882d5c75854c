-- +goose Up
-- Second security audit (issue 34: E6, I1, I6, I7) and issue 33 §5:
--   callback_claims     a callback request takes its step's callback before it reads
--                       its body (cairn_callback_claim), so that a concurrent second
--                       request is refused before it writes anything (E6);
--   cairn_step_decide   refuses a decision on a step that no longer waits, repeat or
--                       not, naming its state (issue 33 §5), and an approval from a
--                       token without a name when more than one approver is required
--                       (I1: unnamed tokens take their role's name, so one person
--                       holding two of them counted twice);
--   run_trees           how many child runs have been started below a root run, for
--                       a bound on a whole tree of child runs (I6);
--   ui_sessions         the web UI's sessions: the browser's cookie holds a random
--                       ID, never an API token (I7).

-- callback_claims: the callback request that is reading its body for step
-- (run_id, step_key), one at a time per step: attempt is the attempt it is for,
-- holder the request's random ID, until when the claim lapses unless renewed (a
-- server that died mid-upload holds no step forever).
CREATE TABLE callback_claims (
    run_id   uuid        NOT NULL,
    step_key text        NOT NULL,
    attempt  integer     NOT NULL,
    holder   uuid        NOT NULL,
    until    timestamptz NOT NULL,
    PRIMARY KEY (run_id, step_key),
    FOREIGN KEY (run_id, step_key) REFERENCES steps (run_id, key) ON DELETE CASCADE
);

-- cairn_callback_claim: the request p_holder takes the callback of attempt
-- p_attempt of step p_key of run p_run for p_ttl, before it reads its body. The
-- step must wait for that attempt's callback as cairn_callback_complete takes it
-- (suspended for it, or still running that attempt with no callback kept): CAR09
-- naming its state otherwise, CA404 for no such step. A claim another request
-- holds for the same attempt and that has not lapsed is a CAR09 too: nothing is
-- written. Lock order: the step (key share), then its claim.
-- +goose StatementBegin
CREATE FUNCTION cairn_callback_claim(p_run uuid, p_key text, p_attempt integer, p_holder uuid, p_ttl interval)
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
-- +goose StatementEnd

-- cairn_step_decide (00013) with p_named: whether the approver's token has a name
-- of its own. The order of the checks changes: a step that does not wait for
-- approval is CAR09 naming its state (rejected, failed, succeeded, canceled; and
-- its run's state when the run has ended) for every caller, an approver who
-- decided before included; only while the step waits is a repeat answered with
-- the first decision (counted false). Then the role (CA403), then: an approval of
-- a step that needs more than one approver from a token without a name is CA403,
-- since such tokens are told apart by their role only.
DROP FUNCTION cairn_step_decide(uuid, text, text, text, text, text, jsonb);
-- +goose StatementBegin
CREATE FUNCTION cairn_step_decide(p_run uuid, p_key text, p_approver text, p_role text, p_decision text,
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
-- +goose StatementEnd

-- run_trees: how many child runs the workflow steps of a tree of runs have started
-- below its root (the run with no parent), counted when each is created
-- (catalog.ChildStart), so that a tree's size is bounded as a whole, whatever its
-- shape. A tree that had children before this migration is counted from its runs
-- the first time it grows.
CREATE TABLE run_trees (
    root_id uuid    PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
    runs    integer NOT NULL CHECK (runs >= 0)
);

-- ui_sessions: a logged-in browser of the web UI. id_hash is the SHA-256 of the
-- random session ID its cookie holds (the ID itself is stored nowhere);
-- token_hash the SHA-256 of the API token it logged in with (checked against the
-- server's tokens on every request, so that a token removed from CAIRN_TOKENS ends
-- its sessions); name and role the token's when it logged in; expires_at its end.
CREATE TABLE ui_sessions (
    id_hash    bytea       PRIMARY KEY CHECK (length(id_hash) = 32),
    token_hash bytea       NOT NULL CHECK (length(token_hash) = 32),
    name       text        NOT NULL CHECK (length(name) BETWEEN 1 AND 255),
    role       text        NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX ui_sessions_expires_at_idx ON ui_sessions (expires_at);

-- +goose Down
DROP TABLE ui_sessions;
DROP TABLE run_trees;
DROP FUNCTION cairn_step_decide(uuid, text, text, text, text, text, jsonb, boolean);
-- +goose StatementBegin
CREATE FUNCTION cairn_step_decide(p_run uuid, p_key text, p_approver text, p_role text, p_decision text,
                                  p_comment text, p_input jsonb)
RETURNS TABLE (decision text, counted boolean) LANGUAGE plpgsql AS $$
DECLARE
    s         record;
    v_prior   text;
    v_output  jsonb;
BEGIN
    IF p_decision IS NULL OR p_decision NOT IN ('approved', 'rejected') THEN
        RAISE EXCEPTION 'decision % is not approved or rejected', p_decision USING ERRCODE = 'CA422';
    END IF;
    SELECT st.status, st.wait_kind, st.attempts, st.approval_required, st.approval_roles, st.approvals INTO s
      FROM steps st WHERE st.run_id = p_run AND st.key = p_key FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'step % of run % not found', p_key, p_run USING ERRCODE = 'CA404';
    END IF;
    SELECT a.decision INTO v_prior FROM approvals a
     WHERE a.run_id = p_run AND a.step_key = p_key AND a.attempt = s.attempts AND a.approver = p_approver;
    IF FOUND THEN
        RETURN QUERY SELECT v_prior, false;
        RETURN;
    END IF;
    IF s.status <> 'suspended' OR s.wait_kind IS DISTINCT FROM 'approval' THEN
        RAISE EXCEPTION 'step % of run % is %, not waiting for approval', p_key, p_run,
            CASE WHEN s.status = 'suspended' THEN 'waiting for a ' || s.wait_kind ELSE s.status END
            USING ERRCODE = 'CAR09';
    END IF;
    IF p_role IS DISTINCT FROM 'admin' AND NOT (p_role = ANY (s.approval_roles)) THEN
        RAISE EXCEPTION 'step % may be decided by the roles %, not %', p_key,
            array_to_string(s.approval_roles || '{admin}'::text[], ', '), coalesce(p_role, 'none')
            USING ERRCODE = 'CA403';
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
-- +goose StatementEnd
DROP FUNCTION cairn_callback_claim(uuid, text, integer, uuid, interval);
DROP TABLE callback_claims;
