-- Maps and child runs. A map step is suspended (wait_kind map) while its instances,
-- one row of steps per item (key "<map key>[<index>]"), run; cairn_map_expand
-- creates them in batches. A workflow step can wait for a child run it created
-- (cairn_child_suspend); the child's end resolves it (cairn_child_resolve, run by
-- the trigger runs_child_ended), and a parent's cancel, pause or resume reaches its
-- children (runs_children_follow): both triggers are in triggers.sql. Lock order:
-- a parent's rows before its children's. Go callers: catalog/map.go,
-- catalog/child.go.

-- cairn_map_expand creates the next instances of the map step p_key of p_run: from
-- its inline items (p_items NULL: up to p_limit of them), or the items p_items (a JSON
-- array, read from its blob by the caller, which then gives the blob offset after
-- them, p_next_offset, and whether the blob ended, p_end). Each instance is ready
-- (held if the map step is), with the map step's needs, attempts and on_exhausted;
-- the cursor moves in the same transaction, and the run counts the new steps. The
-- caller holds the step_maps row's lock. Returns how many it created.
CREATE OR REPLACE FUNCTION cairn_map_expand(p_run uuid, p_key text, p_limit integer, p_items jsonb,
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

-- cairn_child_suspend: the running step p_key of p_run, fenced by its lease token
-- (false, nothing written, when the token is not its current lease), waits for its
-- child run p_child, created in the same transaction (its parent_step is set here).
-- Its attempt ends succeeded and the step is suspended (step.suspended {kind
-- child_run, run_id}). A child that has already ended (a retried child that had
-- nothing left to run) resolves the step at once.
CREATE OR REPLACE FUNCTION cairn_child_suspend(p_run uuid, p_key text, p_token bigint, p_child uuid)
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

-- cairn_child_resolve ends the parent step that waits for the ended run p_child, if
-- one does (else nothing: the parent step was canceled, or resolved already):
-- succeeded with {sink step key: output} when the child succeeded; else failed with
-- {message, code child_failed or child_canceled, run_id, cause: the child's error}.
CREATE OR REPLACE FUNCTION cairn_child_resolve(p_child uuid)
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
