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

-- Part 2: map. A step with `map:` runs one instance per item of a list (a CEL list,
-- or a $blob holding a JSON array or JSON Lines). Each instance is a row of steps
-- (key "<map key>[<index>]", map_parent the map step's key, map_index, map_item) with
-- its own attempts, retries, checkpoints and output, claimed like any step. The map
-- step itself is suspended (wait_kind map) while its instances run. Instances are
-- created in pages by the dispatchers' expanders (step_maps holds the cursor, moved
-- in the transaction that creates the page: a crash creates no duplicates and loses
-- none), at most max_parallel unfinished at once; when all have ended, the map step
-- gets the list of their outputs in item order.
ALTER TABLE steps DROP CONSTRAINT steps_key_check;
ALTER TABLE steps ADD CONSTRAINT steps_key_check
    CHECK (key ~ '^[a-z0-9][a-z0-9_-]{0,62}(\[[0-9]{1,12}\])?$');
ALTER TABLE steps ADD COLUMN map_parent text;
ALTER TABLE steps ADD COLUMN map_index bigint;
ALTER TABLE steps ADD COLUMN map_item jsonb;
ALTER TABLE steps ADD CONSTRAINT steps_map_instance_check
    CHECK ((map_parent IS NULL) = (map_index IS NULL) AND (map_parent IS NULL OR key = map_parent || '[' || map_index || ']'));
-- A map's instances by state (its live count, its failures, its outputs in order).
CREATE INDEX steps_map_idx ON steps (run_id, map_parent, status, map_index) WHERE map_parent IS NOT NULL;

-- step_maps: one row per map step of a run.
--   max_parallel       most instances unfinished at once (so at most that many run);
--   tolerate_count     failures tolerated (NULL: see tolerate_percent; both NULL: 0);
--   tolerate_percent   failures tolerated as a percentage of the items;
--   items              the list, when the expression gave one (inline);
--   blob_key, blob_format  the $blob of items (array: a JSON array; lines: JSON Lines);
--   next_index         how many instances exist: the index of the next item;
--   next_offset        the byte offset in the blob where the next item starts;
--   expanded           every item has its instance (next_index is the item count);
--   finished           the map step has been resolved.
CREATE TABLE step_maps (
    run_id           uuid    NOT NULL,
    step_key         text    NOT NULL,
    max_parallel     integer NOT NULL CHECK (max_parallel >= 1),
    tolerate_count   bigint  CHECK (tolerate_count >= 0),
    tolerate_percent numeric CHECK (tolerate_percent >= 0 AND tolerate_percent <= 100),
    items            jsonb   CHECK (items IS NULL OR jsonb_typeof(items) = 'array'),
    blob_key         text,
    blob_format      text    CHECK (blob_format IN ('array', 'lines')),
    next_index       bigint  NOT NULL DEFAULT 0 CHECK (next_index >= 0),
    next_offset      bigint  NOT NULL DEFAULT 0 CHECK (next_offset >= 0),
    expanded         boolean NOT NULL DEFAULT false,
    finished         boolean NOT NULL DEFAULT false,
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, step_key),
    FOREIGN KEY (run_id, step_key) REFERENCES steps (run_id, key) ON DELETE CASCADE,
    CHECK ((items IS NULL) <> (blob_key IS NULL)),
    CHECK ((blob_key IS NULL) = (blob_format IS NULL))
);
-- The expanders' queue: maps not finished.
CREATE INDEX step_maps_open_idx ON step_maps (created_at) WHERE NOT finished;

-- cairn_map_expand creates the next instances of the map step p_key of p_run: from
-- its inline items (p_items NULL: up to p_limit of them), or the items p_items (a JSON
-- array, read from its blob by the caller, which then gives the blob offset after
-- them, p_next_offset, and whether the blob ended, p_end). Each instance is ready
-- (held if the map step is), with the map step's needs, attempts and on_exhausted;
-- the cursor moves in the same transaction, and the run counts the new steps. The
-- caller holds the step_maps row's lock. Returns how many it created.
-- +goose StatementBegin
CREATE FUNCTION cairn_map_expand(p_run uuid, p_key text, p_limit integer, p_items jsonb,
                                 p_next_offset bigint, p_end boolean)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    m    record;
    st   record;
    v_n  integer;
    v_total bigint;
BEGIN
    SELECT * INTO m FROM step_maps WHERE run_id = p_run AND step_key = p_key;
    IF NOT FOUND OR m.expanded THEN
        RETURN 0;
    END IF;
    SELECT needs, max_attempts, on_exhausted, held INTO st FROM steps WHERE run_id = p_run AND key = p_key;
    WITH src AS (
        SELECT e.item, CASE WHEN p_items IS NULL THEN e.ord - 1 ELSE m.next_index + e.ord - 1 END AS idx
        FROM jsonb_array_elements(coalesce(p_items, m.items)) WITH ORDINALITY AS e(item, ord)
        WHERE p_items IS NOT NULL OR e.ord > m.next_index
        ORDER BY e.ord
        LIMIT CASE WHEN p_items IS NULL THEN p_limit END
    ), ins AS (
        INSERT INTO steps (run_id, key, status, needs, deps_remaining, max_attempts, ready_at, on_exhausted, held,
                           map_parent, map_index, map_item)
        SELECT p_run, p_key || '[' || src.idx || ']', 'ready', st.needs, 0, st.max_attempts, now(), st.on_exhausted,
               st.held, p_key, src.idx, src.item
        FROM src
        RETURNING 1
    )
    SELECT count(*) INTO v_n FROM ins;
    IF p_items IS NULL THEN
        v_total := jsonb_array_length(m.items);
        UPDATE step_maps SET next_index = next_index + v_n, expanded = next_index + v_n >= v_total
        WHERE run_id = p_run AND step_key = p_key;
    ELSE
        UPDATE step_maps SET next_index = next_index + v_n, next_offset = p_next_offset, expanded = p_end
        WHERE run_id = p_run AND step_key = p_key;
    END IF;
    IF v_n > 0 THEN
        UPDATE runs SET steps_total = steps_total + v_n, steps_remaining = steps_remaining + v_n WHERE id = p_run;
        PERFORM cairn_wake();
    END IF;
    RETURN v_n;
END $$;
-- +goose StatementEnd

-- cairn_run_settle: as in 00005, but a failed map instance does not fail the run by
-- itself: its map step decides (tolerate_failures), and fails if it must.
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
BEGIN
    UPDATE runs SET steps_remaining = greatest(steps_remaining - p_done, 0)
    WHERE id = p_run AND status IN ('pending', 'running', 'paused', 'compensating')
    RETURNING steps_remaining, status INTO v_remaining, v_status;
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
        UPDATE runs SET status = 'succeeded', finished_at = now(), pause_reason = NULL WHERE id = p_run;
        PERFORM cairn_event(p_run, 'run.succeeded', NULL, NULL, '{}');
    END IF;
END $$;
-- +goose StatementEnd

-- cairn_run_retry: as in 00009, but a map's instances are not steps of the version's
-- layout: a retry onto another version keeps them (the map step takes them up again),
-- does not compare them with the new version, and draws no edges to them.
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
    CHECK (wait_kind IN ('sleep', 'signal', 'approval', 'callback', 'child_run', 'map'));
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
         WHERE s.run_id = p_child AND s.map_parent IS NULL
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
-- way are resumed. Each child's own children follow it in turn. The children are
-- locked as they are chosen (a child that ends meanwhile is skipped, not an error
-- that would undo the parent's change).
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
UPDATE steps SET wait_kind = NULL WHERE wait_kind IN ('child_run', 'map') AND status <> 'suspended';
UPDATE steps SET status = 'failed', finished_at = now(), wait_kind = NULL
 WHERE wait_kind IN ('child_run', 'map');
ALTER TABLE steps DROP CONSTRAINT steps_wait_kind_check;
ALTER TABLE steps ADD CONSTRAINT steps_wait_kind_check
    CHECK (wait_kind IN ('sleep', 'signal', 'approval', 'callback'));
ALTER TABLE steps DROP COLUMN child_run;
DROP INDEX runs_parent_step_idx;
ALTER TABLE runs DROP CONSTRAINT runs_parent_step_check;
ALTER TABLE runs DROP COLUMN parent_step;
DROP FUNCTION cairn_map_expand(uuid, text, integer, jsonb, bigint, boolean);
DROP TABLE step_maps;
DROP INDEX steps_map_idx;
-- Map instances cannot exist without map: they go.
DELETE FROM steps WHERE map_parent IS NOT NULL;
ALTER TABLE steps DROP CONSTRAINT steps_map_instance_check;
ALTER TABLE steps DROP COLUMN map_item, DROP COLUMN map_index, DROP COLUMN map_parent;
ALTER TABLE steps DROP CONSTRAINT steps_key_check;
ALTER TABLE steps ADD CONSTRAINT steps_key_check CHECK (key ~ '^[a-z0-9][a-z0-9_-]{0,62}$');

-- cairn_run_retry, as in 00009.
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
          FROM steps WHERE run_id = p_run AND status = 'succeeded';
        IF v_mismatch <> '' THEN
            RAISE EXCEPTION 'run % cannot move onto version % of %: steps it keeps differ there: %',
                p_run, v_target, v_run.workflow, v_mismatch USING ERRCODE = 'CAV09';
        END IF;

        -- Lay the steps the run does not keep out from the new version.
        DELETE FROM steps s
        WHERE s.run_id = p_run AND s.status <> 'succeeded'
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
        SELECT p_run, n, s.key FROM steps s, unnest(s.needs) AS n WHERE s.run_id = p_run;
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

-- cairn_run_settle, as in 00005.
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
BEGIN
    UPDATE runs SET steps_remaining = greatest(steps_remaining - p_done, 0)
    WHERE id = p_run AND status IN ('pending', 'running', 'paused', 'compensating')
    RETURNING steps_remaining, status INTO v_remaining, v_status;
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
    WHERE run_id = p_run AND status = 'failed' AND phase = 'main'
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
        UPDATE runs SET status = 'succeeded', finished_at = now(), pause_reason = NULL WHERE id = p_run;
        PERFORM cairn_event(p_run, 'run.succeeded', NULL, NULL, '{}');
    END IF;
END $$;
-- +goose StatementEnd
