-- +goose Up
-- Approvals and callbacks (issue 14), on the waits of 00010: an approval step
-- suspends (wait_kind approval) until `required` distinct approvers approve it, one
-- rejects it, or its timeout passes (cairn_wake_due, as for every wait); a step
-- whose function answered {"$suspend": …} suspends (wait_kind callback) until a
-- third party completes it (cairn_callback_complete) or its timeout passes.
--
-- The functions:
--   cairn_approval_suspend(run, key, lease_token, required, roles, timeout_at, on_timeout)
--       a claimed approval step waits (cairn_step_suspend), keeping its rule.
--   cairn_step_decide(run, key, approver, role, decision, comment, input)
--       records one approver's decision; the step succeeds when enough approved,
--       fails at the first reject.
--   cairn_callback_complete(run, key, attempt, outcome, output, error)
--       the callback of an attempt that suspended ends its step; one that comes
--       while that attempt still runs is kept until it suspends.
--   cairn_callback_take(run, key)
--       a step that just suspended for its callback takes the one kept for it.
--
-- Lock order, as everywhere: steps, then the run's row.

-- steps: an approval's rule, set when it suspends (meaningful while it waits):
--   approval_required  how many distinct approvers must approve;
--   approval_roles     the token roles that may decide (admin always may);
--   approvals          approvals in so far (of the current attempt).
ALTER TABLE steps ADD COLUMN approval_required integer CHECK (approval_required >= 1);
ALTER TABLE steps ADD COLUMN approval_roles text[];
ALTER TABLE steps ADD COLUMN approvals integer NOT NULL DEFAULT 0 CHECK (approvals >= 0);

-- steps: a callback that came before its attempt answered {"$suspend": …} (the
-- third party was quicker than the function's exit), kept until it suspends:
--   callback_attempt   the attempt it is for;
--   callback_outcome   succeeded or failed;
--   callback_output    the output (succeeded), callback_error the error (failed).
ALTER TABLE steps ADD COLUMN callback_attempt integer;
ALTER TABLE steps ADD COLUMN callback_outcome text CHECK (callback_outcome IN ('succeeded', 'failed'));
ALTER TABLE steps ADD COLUMN callback_output jsonb;
ALTER TABLE steps ADD COLUMN callback_error jsonb;

-- approvals: every decision on an approval step, one per approver and attempt of
-- the step (a repeat is not a second vote). approver is the token's name.
CREATE TABLE approvals (
    run_id     uuid        NOT NULL,
    step_key   text        NOT NULL,
    attempt    integer     NOT NULL,
    approver   text        NOT NULL CHECK (length(approver) BETWEEN 1 AND 255),
    decision   text        NOT NULL CHECK (decision IN ('approved', 'rejected')),
    comment    text        NOT NULL DEFAULT '' CHECK (length(comment) <= 4096),
    input      jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, step_key, attempt, approver),
    FOREIGN KEY (run_id, step_key) REFERENCES steps (run_id, key) ON DELETE CASCADE
);

-- cairn_approval_suspend: a running approval step, fenced by its lease token (false,
-- nothing written, when the token is not its lease), suspends (cairn_step_suspend,
-- wait_kind approval) with its rule: p_required distinct approvals of tokens whose
-- role is in p_roles (or admin). Raises CA422 for a bad rule.
-- +goose StatementBegin
CREATE FUNCTION cairn_approval_suspend(p_run uuid, p_key text, p_token bigint, p_required integer,
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
-- +goose StatementEnd

-- cairn_step_decide records the decision (approved or rejected) of approver
-- p_approver, whose token has role p_role, on approval step p_key of run p_run.
-- An approver who decided on the step's current attempt before is answered with
-- that first decision (counted false): nothing is written, whatever the step's
-- state now. Otherwise the step must be a suspended approval (CAR09, naming its
-- state), the role one of its roles or admin (CA403). The decision is recorded with
-- an event (step.approved or step.rejected, naming the actor); the required-th
-- approval ends the step succeeded with {"approved_by": [{name, comment, input,
-- at}…]} (in order), a rejection ends it failed, terminal, code rejected.
-- Concurrent decisions serialize on the step's row. CA404 for no such step.
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

-- cairn_callback_complete ends step p_key of run p_run, suspended for the callback
-- of its attempt p_attempt: succeeded with p_output or failed (terminal) with
-- p_error (cairn_step_resolve, reason callback); it returns false. While that
-- attempt still runs (its function has handed out the URL but not yet answered
-- {"$suspend": …}), the callback is kept on the step (step.callback_received) and
-- applied when it suspends (cairn_callback_take); it returns true. CAR09 when the
-- step does not wait for that attempt's callback (it was completed, timed out,
-- canceled, runs again, or a callback is kept already): nothing is written. CA404
-- for no such step.
-- +goose StatementBegin
CREATE FUNCTION cairn_callback_complete(p_run uuid, p_key text, p_attempt integer, p_outcome text,
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
-- +goose StatementEnd

-- cairn_callback_take: step p_key of run p_run, just suspended for its callback,
-- takes the callback kept for its attempt, if any (cairn_step_resolve, reason
-- callback). Returns whether there was one.
-- +goose StatementBegin
CREATE FUNCTION cairn_callback_take(p_run uuid, p_key text)
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
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION cairn_callback_take(uuid, text);
DROP FUNCTION cairn_callback_complete(uuid, text, integer, text, jsonb, jsonb);
DROP FUNCTION cairn_step_decide(uuid, text, text, text, text, text, jsonb);
DROP FUNCTION cairn_approval_suspend(uuid, text, bigint, integer, text[], timestamptz, text);
DROP TABLE approvals;
ALTER TABLE steps DROP COLUMN callback_error, DROP COLUMN callback_output, DROP COLUMN callback_outcome,
    DROP COLUMN callback_attempt;
ALTER TABLE steps DROP COLUMN approvals, DROP COLUMN approval_roles, DROP COLUMN approval_required;
