-- +goose Up
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

-- cairn_run_retry: as in 00042, the steps it replaces kept in
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

-- cairn_run_rerun: as in 00042, the steps it reuses keep the times they
-- started and finished at in the source (they were given the rerun's time, the
-- same for all: the compensations of a failed rerun, in reverse completion order
-- with ties broken by key, undid them in the wrong order).
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

-- cairn_run_retry: as in 00042.
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

DROP TABLE step_history;

-- cairn_run_rerun: as in 00042.
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
