-- +goose Up
-- Retry in place and rerun from a step (issue 13, DESIGN §9):
--   - runs.rerun_of and runs.rerun_from_step: the run a rerun was made from, and the
--     step it reran from;
--   - cairn_version_layout: the steps a run of a version starts with, read in one
--     place (the layout arrays of workflow_versions), for the functions below;
--   - cairn_run_retry: a failed or canceled run runs again in place, optionally on
--     another version;
--   - cairn_run_rerun: a new run reusing the outputs of the steps of a finished run
--     that are not downstream of a step, or the plan of one (dry run).
-- Both decide and write once, raising Cairn's SQLSTATEs for a call that cannot be
-- done: CA404 no such run or version, CAR09 the run's state does not allow it,
-- CAV09 the version lacks steps the run keeps, CA422 an unknown step.

ALTER TABLE runs
    ADD COLUMN rerun_of        uuid REFERENCES runs (id) ON DELETE SET NULL,
    ADD COLUMN rerun_from_step text,
    -- rerun_of becomes NULL if its run is ever deleted; the step stays as a record.
    ADD CONSTRAINT runs_rerun_check CHECK (rerun_of IS NULL OR rerun_from_step IS NOT NULL);

-- The reruns of a run, for the foreign key's checks and for finding them.
CREATE INDEX runs_rerun_of_idx ON runs (rerun_of) WHERE rerun_of IS NOT NULL;

-- cairn_version_layout returns the steps a run of a version starts with, in the
-- definition's order (ord, from 1): key, needs, max_attempts. The one place that
-- reads the layout arrays for retry and rerun: a column added to the layout is read
-- here and written where these functions insert or update steps (lay_out below).
-- +goose StatementBegin
CREATE FUNCTION cairn_version_layout(p_workflow text, p_version integer)
RETURNS TABLE (ord bigint, key text, needs text[], max_attempts integer)
LANGUAGE sql STABLE AS $$
    SELECT s.ord, s.k, coalesce(string_to_array(nullif(s.n, ''), ','), '{}'), s.m
    FROM workflow_versions v,
         unnest(v.step_keys, v.step_needs, v.step_max_attempts) WITH ORDINALITY AS s(k, n, m, ord)
    WHERE v.workflow = p_workflow AND v.version = p_version
$$;
-- +goose StatementEnd

-- cairn_version_mismatch names the steps of p_keys (steps a run keeps, with their
-- needs p_needs) that version p_version of p_workflow lacks or gives other needs
-- (compared as sets): '' when it has them all. The compatibility rule of retry and
-- rerun, stated once.
-- +goose StatementBegin
CREATE FUNCTION cairn_version_mismatch(p_workflow text, p_version integer, p_keys text[], p_needs text[])
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
-- +goose StatementEnd

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
-- +goose StatementBegin
CREATE FUNCTION cairn_run_retry(p_run uuid, p_version integer, p_actor text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_run      record;
    v_target   integer;
    v_mismatch text;
    v_started  boolean;
    v_total    integer;
    v_left     integer;
    v_keys     text[];
BEGIN
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
        UPDATE steps s SET needs = l.needs, max_attempts = l.max_attempts
        FROM cairn_version_layout(v_run.workflow, v_target) l
        WHERE s.run_id = p_run AND s.key = l.key AND s.status <> 'succeeded';
        INSERT INTO steps (run_id, key, status, needs, deps_remaining, max_attempts)
        SELECT p_run, l.key, 'waiting', l.needs, cardinality(l.needs), l.max_attempts
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
            lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
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
    ELSE
        PERFORM cairn_wake();
    END IF;
END $$;
-- +goose StatementEnd

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
--
-- It returns the plan: the keys reused and the keys to run, in the version's order.
-- With p_dry_run nothing is written. Otherwise the new run's events are run.created
-- {workflow, version, rerun_of, from_step, actor} and, when steps are reused,
-- step.reused {steps, rerun_of}; dispatchers are woken.
-- +goose StatementBegin
CREATE FUNCTION cairn_run_rerun(p_new uuid, p_source uuid, p_from text, p_input jsonb,
                                p_version integer, p_actor text, p_dry_run boolean)
RETURNS TABLE (reused text[], fresh text[]) LANGUAGE plpgsql AS $$
DECLARE
    v_src      record;
    v_target   integer;
    v_mismatch text;
    v_total    integer;
BEGIN
    SELECT id, workflow, version, status, input INTO v_src FROM runs WHERE id = p_source FOR SHARE;
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
        max_attempts integer, reuse boolean, output jsonb) ON COMMIT DROP;
    TRUNCATE cairn_rerun_plan;
    INSERT INTO cairn_rerun_plan (ord, key, needs, max_attempts, reuse, output)
    SELECT l.ord, l.key, l.needs, l.max_attempts, false, NULL
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

    INSERT INTO runs (id, workflow, version, input, steps_total, steps_remaining, rerun_of, rerun_from_step)
    VALUES (p_new, v_src.workflow, v_target, coalesce(p_input, v_src.input), v_total,
            v_total - cardinality(reused), p_source, p_from);
    INSERT INTO steps (run_id, key, status, needs, deps_remaining, max_attempts, ready_at, output, finished_at)
    SELECT p_new, p.key,
           CASE WHEN p.reuse THEN 'succeeded' WHEN d.unmet = 0 THEN 'ready' ELSE 'waiting' END,
           p.needs, CASE WHEN p.reuse THEN 0 ELSE d.unmet END, p.max_attempts,
           CASE WHEN NOT p.reuse AND d.unmet = 0 THEN now() END,
           p.output, CASE WHEN p.reuse THEN now() END
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
DROP FUNCTION cairn_run_rerun(uuid, uuid, text, jsonb, integer, text, boolean);
DROP FUNCTION cairn_run_retry(uuid, integer, text);
DROP FUNCTION cairn_version_mismatch(text, integer, text[], text[]);
DROP FUNCTION cairn_version_layout(text, integer);
DROP INDEX runs_rerun_of_idx;
ALTER TABLE runs DROP COLUMN rerun_from_step, DROP COLUMN rerun_of;
