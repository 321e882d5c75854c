-- +goose Up
-- Shapes decided at run time (issue 15), part 1: child runs. A `workflow:` step
-- starts a run of another workflow (its child, pinned to a version) and suspends,
-- holding no lease and no slot, until the child ends: the child's output (its sink
-- steps' outputs, by key) is the step's output, its failure or cancel the step's
-- failure. Everything that links the two lives here, in SQL, so that it holds
-- whatever ends the child (its last step, a cancel, a bulk operation) and survives
-- any crash:
--   cairn_child_suspend(run, key, lease_token, child)
--       the claimed workflow step, fenced by its lease, waits for the child run it
--       has just created in the same transaction.
--   trigger runs_child_ended
--       a child run that ends resolves its parent's step (cairn_step_resolve).
--   trigger runs_children_follow
--       a parent canceled cancels its unfinished children; paused by an operator,
--       pauses them; resumed, resumes the children it paused.
-- Lock order, as everywhere: steps, then the run's row; a parent's rows before its
-- children's.

-- runs.parent_step: the step of parent_id that started the run (a child run); NULL
-- for the runs an API client linked to a parent itself (issue 13's parent).
ALTER TABLE runs ADD COLUMN parent_step text;
ALTER TABLE runs ADD CONSTRAINT runs_parent_step_check CHECK (parent_step IS NULL OR parent_id IS NOT NULL);
-- The children of a step, newest first (a retried step finds its child).
CREATE INDEX runs_parent_step_idx ON runs (parent_id, parent_step, id DESC) WHERE parent_step IS NOT NULL;

-- steps.child_run: the run a suspended workflow step waits for (wait_kind child_run);
-- kept after it resumes, for its history.
ALTER TABLE steps ADD COLUMN child_run uuid;
ALTER TABLE steps DROP CONSTRAINT steps_wait_kind_check;
ALTER TABLE steps ADD CONSTRAINT steps_wait_kind_check
    CHECK (wait_kind IN ('sleep', 'signal', 'approval', 'callback', 'child_run'));
ALTER TABLE steps ADD CONSTRAINT steps_child_wait_check
    CHECK (status <> 'suspended' OR wait_kind <> 'child_run' OR child_run IS NOT NULL);

-- cairn_child_suspend: the running step p_key of p_run, fenced by its lease token
-- (false, nothing written, when the token is not its current lease), waits for its
-- child run p_child, created in the same transaction (its parent_step is set here).
-- Its attempt ends succeeded and the step is suspended (step.suspended {kind
-- child_run, run_id}). A child that has already ended (a retried child that had
-- nothing left to run) resolves the step at once.
-- +goose StatementBegin
CREATE FUNCTION cairn_child_suspend(p_run uuid, p_key text, p_token bigint, p_child uuid)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_attempt integer;
    v_child   text;
BEGIN
    SELECT attempts INTO v_attempt FROM steps
     WHERE run_id = p_run AND key = p_key AND lease_token = p_token AND status = 'running'
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false; -- lease lost
    END IF;

    UPDATE steps SET status = 'suspended', wait_kind = 'child_run', child_run = p_child,
        wait_until = NULL, wait_name = NULL, waiting_since = now(), timeout_at = NULL, on_timeout = 'fail',
        lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
    WHERE run_id = p_run AND key = p_key;
    UPDATE attempts SET status = 'succeeded', finished_at = now()
    WHERE run_id = p_run AND step_key = p_key AND number = v_attempt;
    PERFORM cairn_event(p_run, 'step.suspended', p_key, v_attempt,
        jsonb_build_object('kind', 'child_run', 'run_id', p_child, 'on_timeout', 'fail'));

    UPDATE runs SET parent_id = p_run, parent_step = p_key WHERE id = p_child
    RETURNING status INTO v_child;
    IF v_child IS NULL THEN
        RAISE EXCEPTION 'child run % not found', p_child USING ERRCODE = 'CA404';
    END IF;
    IF v_child IN ('succeeded', 'failed', 'canceled') THEN
        PERFORM cairn_child_resolve(p_child);
    END IF;
    RETURN true;
END $$;
-- +goose StatementEnd

-- cairn_child_resolve ends the parent step that waits for the ended run p_child, if
-- one does (else nothing: the parent step was canceled, or resolved already):
-- succeeded with {sink step key: output} when the child succeeded; else failed with
-- {message, code child_failed or child_canceled, run_id, cause: the child's error}.
-- +goose StatementBegin
CREATE FUNCTION cairn_child_resolve(p_child uuid)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    c        record;
    v_output jsonb;
BEGIN
    SELECT id, status, error, parent_id, parent_step INTO c FROM runs WHERE id = p_child;
    IF NOT FOUND OR c.parent_step IS NULL THEN
        RETURN;
    END IF;
    PERFORM 1 FROM steps
     WHERE run_id = c.parent_id AND key = c.parent_step AND status = 'suspended'
       AND wait_kind = 'child_run' AND child_run = p_child
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF c.status = 'succeeded' THEN
        SELECT coalesce(jsonb_object_agg(s.key, coalesce(s.output, 'null'::jsonb) ORDER BY s.key), '{}'::jsonb)
          INTO v_output
          FROM steps s
         WHERE s.run_id = p_child
           AND NOT EXISTS (SELECT 1 FROM step_edges e WHERE e.run_id = p_child AND e.from_key = s.key);
        PERFORM cairn_step_resolve(c.parent_id, c.parent_step, 'succeeded', v_output, NULL, 'child_succeeded');
    ELSE
        PERFORM cairn_step_resolve(c.parent_id, c.parent_step, 'failed', NULL,
            jsonb_strip_nulls(jsonb_build_object(
                'message', format('child run %s %s', p_child, c.status),
                'code', 'child_' || c.status, 'run_id', p_child, 'cause', c.error)),
            'child_' || c.status);
    END IF;
END $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION cairn_child_ended()
RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cairn_child_resolve(NEW.id);
    RETURN NULL;
END $$;
-- +goose StatementEnd

CREATE TRIGGER runs_child_ended AFTER UPDATE OF status ON runs
    FOR EACH ROW
    WHEN (NEW.parent_step IS NOT NULL AND NEW.status IN ('succeeded', 'failed', 'canceled')
          AND OLD.status NOT IN ('succeeded', 'failed', 'canceled'))
    EXECUTE FUNCTION cairn_child_ended();

-- cairn_children_follow makes a parent's children follow it: canceled, they are
-- canceled (those not ended); paused by an operator (pause_reason run), the pending
-- and running ones are paused (actor parent:<id>); resumed, the children paused that
-- way are resumed. Each child's own children follow it in turn.
-- +goose StatementBegin
CREATE FUNCTION cairn_children_follow()
RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    c       record;
    v_actor text := 'parent:' || NEW.id;
BEGIN
    IF NEW.status = 'canceled' THEN
        FOR c IN SELECT id FROM runs
                  WHERE parent_id = NEW.id AND parent_step IS NOT NULL AND status IN ('pending', 'running', 'paused')
                  ORDER BY id
        LOOP
            PERFORM cairn_run_cancel(c.id, format('parent run %s canceled', NEW.id));
        END LOOP;
    ELSIF NEW.status = 'paused' AND NEW.pause_reason = 'run' THEN
        FOR c IN SELECT id FROM runs
                  WHERE parent_id = NEW.id AND parent_step IS NOT NULL AND status IN ('pending', 'running')
                  ORDER BY id
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
        LOOP
            PERFORM cairn_run_resume(c.id, v_actor, format('parent run %s resumed', NEW.id));
        END LOOP;
    END IF;
    RETURN NULL;
END $$;
-- +goose StatementEnd

CREATE TRIGGER runs_children_follow AFTER UPDATE OF status, pause_reason ON runs
    FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.pause_reason IS DISTINCT FROM NEW.pause_reason)
    EXECUTE FUNCTION cairn_children_follow();

-- +goose Down
DROP TRIGGER runs_children_follow ON runs;
DROP FUNCTION cairn_children_follow();
DROP TRIGGER runs_child_ended ON runs;
DROP FUNCTION cairn_child_ended();
DROP FUNCTION cairn_child_resolve(uuid);
DROP FUNCTION cairn_child_suspend(uuid, text, bigint, uuid);
ALTER TABLE steps DROP CONSTRAINT steps_child_wait_check;
UPDATE steps SET wait_kind = NULL WHERE wait_kind = 'child_run' AND status <> 'suspended';
UPDATE steps SET status = 'failed', finished_at = now(), wait_kind = NULL
 WHERE wait_kind = 'child_run';
ALTER TABLE steps DROP CONSTRAINT steps_wait_kind_check;
ALTER TABLE steps ADD CONSTRAINT steps_wait_kind_check
    CHECK (wait_kind IN ('sleep', 'signal', 'approval', 'callback'));
ALTER TABLE steps DROP COLUMN child_run;
DROP INDEX runs_parent_step_idx;
ALTER TABLE runs DROP CONSTRAINT runs_parent_step_check;
ALTER TABLE runs DROP COLUMN parent_step;
