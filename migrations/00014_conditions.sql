-- +goose Up
-- Conditions, trigger rules and failure handling (issue 15).
--
--   when        a step's CEL condition is decided once, in Go, when the step is ready
--               (condition 'pending' until then; the claim does not take such a step).
--               cairn_condition_decide writes the decision: true → claimable; false →
--               skipped (reason condition_false), no attempt; an expression that
--               failed → failed (code expression).
--   after       a step's trigger rule (all_succeeded, all_done, none_failed,
--               any_failed), decided in SQL in the transaction that settles its
--               upstream: cairn_skip_dependents for an upstream that failed or was
--               skipped, cairn_steps_succeed and cairn_step_resolve for one that
--               succeeded. SQL decides once, then writes: a step whose rule can no
--               longer hold is skipped (upstream_failed, upstream_skipped,
--               no_upstream_failed), never left waiting.
--   compensate  when a run would end failed, cairn_run_settle lays out, in the same
--               transaction, one step per succeeded step that has a compensation
--               (key compensate-<key>, chained in reverse completion order), then the
--               version's on_failure steps after the last of them, and the run is
--               compensating until they end; then it fails, a failed handler named
--               in its error (handlers_failed).
--
-- Lock order, as everywhere: steps, then the run's row.

ALTER TABLE runs DROP CONSTRAINT runs_status_check;
ALTER TABLE runs ADD CONSTRAINT runs_status_check
    CHECK (status IN ('pending', 'running', 'paused', 'compensating', 'succeeded', 'failed', 'canceled'));

-- steps:
--   trigger_rule         when the step runs, given how its upstream ended;
--   deps_failed          upstream steps that ended without succeeding (failed or canceled);
--   deps_skipped         upstream steps that were skipped;
--   condition            NULL (no when), pending (not decided yet), true, false or error;
--   skip_reason          why a skipped step was skipped;
--   phase                main (a step of the DAG), compensate or on_failure;
--   compensates          the step a compensate step compensates;
--   compensate_attempts  max_attempts of the step's compensation; NULL: it has none.
ALTER TABLE steps
    ADD COLUMN trigger_rule text NOT NULL DEFAULT 'all_succeeded'
        CHECK (trigger_rule IN ('all_succeeded', 'all_done', 'none_failed', 'any_failed')),
    ADD COLUMN deps_failed integer NOT NULL DEFAULT 0 CHECK (deps_failed >= 0),
    ADD COLUMN deps_skipped integer NOT NULL DEFAULT 0 CHECK (deps_skipped >= 0),
    ADD COLUMN condition text CHECK (condition IN ('pending', 'true', 'false', 'error')),
    ADD COLUMN skip_reason text,
    ADD COLUMN phase text NOT NULL DEFAULT 'main' CHECK (phase IN ('main', 'compensate', 'on_failure')),
    ADD COLUMN compensates text,
    ADD COLUMN compensate_attempts integer CHECK (compensate_attempts >= 1),
    ADD CONSTRAINT steps_compensates_check CHECK ((phase = 'compensate') = (compensates IS NOT NULL));
-- The conditions to decide, by when they became ready.
CREATE INDEX steps_condition_idx ON steps (ready_at) WHERE status = 'ready' AND condition = 'pending' AND NOT held;

-- workflow_versions: parallel to step_keys (or empty, for versions deployed before):
-- each step's trigger rule ('' for all_succeeded), whether it has a when, and the
-- max_attempts of its compensation (0: none); and the on_failure steps.
ALTER TABLE workflow_versions
    ADD COLUMN step_after text[] NOT NULL DEFAULT '{}',
    ADD COLUMN step_when boolean[] NOT NULL DEFAULT '{}',
    ADD COLUMN step_compensate integer[] NOT NULL DEFAULT '{}',
    ADD COLUMN on_failure_keys text[] NOT NULL DEFAULT '{}',
    ADD COLUMN on_failure_max_attempts integer[] NOT NULL DEFAULT '{}',
    ADD CONSTRAINT workflow_versions_conditions_check
        CHECK (cardinality(step_after) IN (0, cardinality(step_keys))
               AND cardinality(step_when) IN (0, cardinality(step_keys))
               AND cardinality(step_compensate) IN (0, cardinality(step_keys))
               AND cardinality(on_failure_keys) = cardinality(on_failure_max_attempts));

-- cairn_skip_dependents settles the dependents of a step that ended without
-- succeeding (failed, canceled or skipped): each counts it (deps_failed or
-- deps_skipped) and applies its trigger rule. all_succeeded: skipped at once
-- (upstream_failed or upstream_skipped); none_failed: skipped at once when it
-- failed (upstream_failed); when no upstream is left: all_done and none_failed are
-- ready, any_failed is ready when one failed, else skipped (no_upstream_failed).
-- Skipped dependents settle theirs in turn. One step.skipped event names them all
-- (steps, because, reasons). Returns how many it skipped.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_skip_dependents(p_run uuid, p_key text)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_queue   text[] := ARRAY[p_key];
    v_from    text;
    v_failed  boolean;
    v_reason  text;
    v_rows    jsonb;
    v_skipped text[] := '{}';
    v_reasons jsonb := '{}';
    v_ready   integer := 0;
    d         record;
BEGIN
    WHILE cardinality(v_queue) > 0 LOOP
        v_from := v_queue[1];
        v_queue := v_queue[2:];
        SELECT status <> 'skipped' INTO v_failed FROM steps WHERE run_id = p_run AND key = v_from;
        WITH upd AS (
            UPDATE steps s SET deps_remaining = s.deps_remaining - 1,
                deps_failed  = s.deps_failed + v_failed::integer,
                deps_skipped = s.deps_skipped + (NOT v_failed)::integer
            FROM step_edges e
            WHERE e.run_id = p_run AND e.from_key = v_from
              AND s.run_id = p_run AND s.key = e.to_key AND s.status = 'waiting'
            RETURNING s.key, s.trigger_rule, s.deps_remaining, s.deps_failed
        )
        SELECT coalesce(jsonb_agg(to_jsonb(upd) ORDER BY upd.key), '[]') INTO v_rows FROM upd;
        FOR d IN SELECT * FROM jsonb_to_recordset(v_rows)
                 AS x(key text, trigger_rule text, deps_remaining integer, deps_failed integer)
        LOOP
            v_reason := CASE
                WHEN d.trigger_rule = 'all_succeeded' THEN
                    CASE WHEN v_failed THEN 'upstream_failed' ELSE 'upstream_skipped' END
                WHEN d.trigger_rule = 'none_failed' AND v_failed THEN 'upstream_failed'
                WHEN d.deps_remaining > 0 THEN NULL
                WHEN d.trigger_rule = 'any_failed' AND d.deps_failed = 0 THEN 'no_upstream_failed'
                END;
            IF v_reason IS NOT NULL THEN
                UPDATE steps SET status = 'skipped', finished_at = now(), skip_reason = v_reason,
                    last_error = jsonb_build_object('message', CASE v_reason
                        WHEN 'upstream_failed' THEN 'upstream step ' || v_from || ' did not succeed'
                        WHEN 'upstream_skipped' THEN 'upstream step ' || v_from || ' was skipped'
                        ELSE 'no upstream step failed (after: any_failed)' END)
                WHERE run_id = p_run AND key = d.key;
                v_skipped := v_skipped || d.key;
                v_reasons := v_reasons || jsonb_build_object(d.key, v_reason);
                v_queue := v_queue || d.key;
            ELSIF d.deps_remaining = 0 THEN
                UPDATE steps SET status = 'ready', ready_at = now() WHERE run_id = p_run AND key = d.key;
                v_ready := v_ready + 1;
            END IF;
        END LOOP;
    END LOOP;
    IF cardinality(v_skipped) > 0 THEN
        PERFORM cairn_event(p_run, 'step.skipped', NULL, NULL,
            jsonb_build_object('steps', (SELECT to_jsonb(array_agg(k ORDER BY k)) FROM unnest(v_skipped) AS k),
                               'because', p_key, 'reasons', v_reasons));
    END IF;
    IF v_ready > 0 THEN
        PERFORM cairn_wake();
    END IF;
    RETURN cardinality(v_skipped);
END $$;
-- +goose StatementEnd

-- cairn_step_skip skips a waiting or ready step for p_reason (condition_false,
-- no_upstream_failed), p_because naming the step that decided it if any
-- (step.skipped), and settles its dependents. Returns how many steps it skipped (0
-- when the step was not waiting or ready); the caller settles the run with it.
-- +goose StatementBegin
CREATE FUNCTION cairn_step_skip(p_run uuid, p_key text, p_reason text, p_because text)
RETURNS integer LANGUAGE plpgsql AS $$
BEGIN
    UPDATE steps SET status = 'skipped', finished_at = now(), skip_reason = p_reason,
        last_error = CASE WHEN p_reason = 'no_upstream_failed'
                          THEN jsonb_build_object('message', 'no upstream step failed (after: any_failed)')
                          ELSE last_error END
    WHERE run_id = p_run AND key = p_key AND status IN ('waiting', 'ready');
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    PERFORM cairn_event(p_run, 'step.skipped', p_key, NULL, jsonb_strip_nulls(jsonb_build_object(
        'steps', jsonb_build_array(p_key), 'reason', p_reason, 'because', p_because)));
    RETURN 1 + cairn_skip_dependents(p_run, p_key);
END $$;
-- +goose StatementEnd

-- cairn_condition_decide writes the decision on a ready step's condition (when), taken
-- in Go under the step's row lock: p_error set, the expression failed and the step
-- fails (last_error p_error, step.failed, dependents settled); else p_pass true
-- makes it claimable, false skips it (condition_false). Returns false, writing
-- nothing, when the step no longer waits for a decision.
-- +goose StatementBegin
CREATE FUNCTION cairn_condition_decide(p_run uuid, p_key text, p_pass boolean, p_error jsonb)
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
-- +goose StatementEnd

-- cairn_steps_succeed: as in 00003, and a dependent whose upstream all succeeded
-- but whose rule is any_failed is skipped (no_upstream_failed) instead of readied.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_steps_succeed(p_runs uuid[], p_keys text[], p_tokens bigint[],
                                               p_outputs text[], p_log_keys text[])
RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    v_ords      bigint[];
    v_ended     uuid[];
    v_ready     bigint;
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
        WHERE s.run_id = b.run_id AND s.key = b.key AND s.lease_token = b.token AND s.status = 'running'
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
        SELECT run_id, count(*) AS n FROM done GROUP BY run_id
    ), r AS (
        UPDATE runs SET revision = runs.revision + p.n,
            steps_remaining = greatest(runs.steps_remaining - p.n, 0)
        FROM per_run p WHERE runs.id = p.run_id
        RETURNING runs.id, runs.revision, p.n, runs.steps_remaining
    ), ev AS (
        INSERT INTO events (run_id, seq, type, step_key, attempt, data)
        SELECT d.run_id, r.revision - r.n + row_number() OVER (PARTITION BY d.run_id ORDER BY d.key),
               'step.succeeded', d.key, d.attempts,
               CASE WHEN jsonb_typeof(d.output) = 'object' AND d.output ? '$blob'
                    THEN jsonb_build_object('output', d.output) ELSE '{}'::jsonb END
        FROM done d JOIN r ON r.id = d.run_id
    )
    SELECT coalesce(array_agg(d.ord), '{}'),
           coalesce(array_agg(DISTINCT d.run_id) FILTER (WHERE r.steps_remaining = 0), '{}'),
           (SELECT count(*) FROM deps WHERE deps.status = 'ready'),
           (SELECT coalesce(array_agg(deps.run_id ORDER BY deps.run_id, deps.key), '{}') FROM deps
             WHERE deps.status = 'waiting' AND deps.deps_remaining = 0),
           (SELECT coalesce(array_agg(deps.key ORDER BY deps.run_id, deps.key), '{}') FROM deps
             WHERE deps.status = 'waiting' AND deps.deps_remaining = 0)
    INTO v_ords, v_ended, v_ready, v_skip_runs, v_skip_keys
    FROM done d JOIN r ON r.id = d.run_id;

    PERFORM cairn_run_settle(x, 0) FROM unnest(v_ended) AS x;
    FOR i IN 1 .. coalesce(cardinality(v_skip_runs), 0) LOOP
        PERFORM cairn_run_settle(v_skip_runs[i], cairn_step_skip(v_skip_runs[i], v_skip_keys[i], 'no_upstream_failed', NULL));
    END LOOP;
    IF v_ready > 0 THEN
        PERFORM cairn_wake();
    END IF;
    RETURN v_ords;
END $$;
-- +goose StatementEnd

-- cairn_step_resolve: as in 00010, and a dependent whose rule is any_failed is
-- skipped (no_upstream_failed) when its upstream all succeeded.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_step_resolve(p_run uuid, p_key text, p_outcome text, p_output jsonb, p_error jsonb,
                                              p_reason text DEFAULT NULL)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_status  text;
    v_kind    text;
    v_attempt integer;
    v_ready   integer := 0;
    v_skipped integer := 0;
    v_skip    text[];
    v_key     text;
BEGIN
    IF p_outcome IS NULL OR p_outcome NOT IN ('succeeded', 'failed') THEN
        RAISE EXCEPTION 'cairn_step_resolve: outcome % is not succeeded or failed', p_outcome
            USING ERRCODE = 'CA400';
    END IF;
    SELECT status, wait_kind, attempts INTO v_status, v_kind, v_attempt
      FROM steps WHERE run_id = p_run AND key = p_key FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'step % of run % not found', p_key, p_run USING ERRCODE = 'CA404';
    END IF;
    IF v_status <> 'suspended' THEN
        RAISE EXCEPTION 'step % of run % is %, not waiting', p_key, p_run, v_status USING ERRCODE = 'CAR09';
    END IF;

    UPDATE steps SET status = p_outcome, finished_at = now(),
        output     = CASE WHEN p_outcome = 'succeeded' THEN p_output ELSE output END,
        last_error = CASE WHEN p_outcome = 'failed' THEN p_error ELSE last_error END
    WHERE run_id = p_run AND key = p_key;

    IF p_outcome = 'succeeded' THEN
        -- Its dependents (step rows, before the run's).
        WITH deps AS (
            UPDATE steps s SET deps_remaining = s.deps_remaining - 1,
                status   = CASE WHEN s.deps_remaining = 1 AND (s.trigger_rule <> 'any_failed' OR s.deps_failed > 0)
                                THEN 'ready' ELSE s.status END,
                ready_at = CASE WHEN s.deps_remaining = 1 THEN now() ELSE s.ready_at END
            FROM step_edges e
            WHERE e.run_id = p_run AND e.from_key = p_key
              AND s.run_id = p_run AND s.key = e.to_key AND s.status = 'waiting'
            RETURNING s.key, s.status, s.deps_remaining
        )
        SELECT count(*) FILTER (WHERE status = 'ready'),
               coalesce(array_agg(key ORDER BY key) FILTER (WHERE status = 'waiting' AND deps_remaining = 0), '{}')
          INTO v_ready, v_skip FROM deps;
        PERFORM cairn_event(p_run, 'step.resumed', p_key, v_attempt,
            jsonb_build_object('kind', v_kind, 'outcome', p_outcome, 'reason', p_reason));
        PERFORM cairn_event(p_run, 'step.succeeded', p_key, v_attempt,
            CASE WHEN jsonb_typeof(p_output) = 'object' AND p_output ? '$blob'
                 THEN jsonb_build_object('output', p_output) ELSE '{}'::jsonb END);
        PERFORM cairn_run_settle(p_run, 1);
        FOREACH v_key IN ARRAY v_skip LOOP
            PERFORM cairn_run_settle(p_run, cairn_step_skip(p_run, v_key, 'no_upstream_failed', p_key));
        END LOOP;
        IF v_ready > 0 THEN
            PERFORM cairn_wake();
        END IF;
    ELSE
        v_skipped := cairn_skip_dependents(p_run, p_key);
        PERFORM cairn_event(p_run, 'step.resumed', p_key, v_attempt,
            jsonb_build_object('kind', v_kind, 'outcome', p_outcome, 'reason', p_reason));
        PERFORM cairn_event(p_run, 'step.failed', p_key, v_attempt,
            jsonb_build_object('error', p_error));
        PERFORM cairn_run_settle(p_run, 1 + v_skipped);
    END IF;
END $$;
-- +goose StatementEnd

-- cairn_run_compensate lays out the failure handlers of a run that would end
-- failed: one step per succeeded step of the DAG that has a compensation (key
-- compensate-<key>, needs that step: its output is in the envelope's deps),
-- chained in reverse completion order (each after the previous one, all_done: a
-- failed compensation does not stop the next), then the version's on_failure steps
-- after the last compensation. Returns how many steps it added.
-- +goose StatementBegin
CREATE FUNCTION cairn_run_compensate(p_run uuid)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_prev text;
    v_key  text;
    v_n    integer := 0;
    st     record;
BEGIN
    FOR st IN
        SELECT key, compensate_attempts FROM steps
        WHERE run_id = p_run AND phase = 'main' AND status = 'succeeded' AND compensate_attempts IS NOT NULL
        ORDER BY finished_at DESC, key DESC
    LOOP
        v_key := 'compensate-' || st.key;
        INSERT INTO steps (run_id, key, status, needs, deps_remaining, max_attempts, ready_at,
                           phase, compensates, trigger_rule)
        VALUES (p_run, v_key, CASE WHEN v_prev IS NULL THEN 'ready' ELSE 'waiting' END, ARRAY[st.key],
                (v_prev IS NOT NULL)::integer, st.compensate_attempts, CASE WHEN v_prev IS NULL THEN now() END,
                'compensate', st.key, 'all_done');
        IF v_prev IS NOT NULL THEN
            INSERT INTO step_edges (run_id, from_key, to_key) VALUES (p_run, v_prev, v_key);
        END IF;
        v_prev := v_key;
        v_n := v_n + 1;
    END LOOP;
    WITH f AS (
        INSERT INTO steps (run_id, key, status, needs, deps_remaining, max_attempts, ready_at, phase, trigger_rule)
        SELECT p_run, o.k, CASE WHEN v_prev IS NULL THEN 'ready' ELSE 'waiting' END, '{}',
               (v_prev IS NOT NULL)::integer, o.m, CASE WHEN v_prev IS NULL THEN now() END, 'on_failure', 'all_done'
        FROM runs r JOIN workflow_versions v ON v.workflow = r.workflow AND v.version = r.version,
             unnest(v.on_failure_keys, v.on_failure_max_attempts) AS o(k, m)
        WHERE r.id = p_run
        RETURNING key
    ), e AS (
        INSERT INTO step_edges (run_id, from_key, to_key)
        SELECT p_run, v_prev, f.key FROM f WHERE v_prev IS NOT NULL
    )
    SELECT v_n + count(*) INTO v_n FROM f;
    RETURN v_n;
END $$;
-- +goose StatementEnd

-- cairn_run_settle: as in 00005, and a run that would end failed compensates first
-- (cairn_run_compensate): it is compensating (run.compensating, its error the
-- failure's) until its handlers end, then failed, the handlers that failed in its
-- error (handlers_failed) and its message.
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

-- cairn_run_cancel: as in 00010, and a compensating run can be canceled too (its
-- handlers are canceled with it).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_run_cancel(p_run uuid, p_reason text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_status text;
BEGIN
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

-- cairn_condition_layout returns, per step of a version, what 00014 adds to its
-- layout: its trigger rule, whether it has a condition, its compensation's
-- max_attempts (NULL: none). Versions deployed before have none of them.
-- +goose StatementBegin
CREATE FUNCTION cairn_condition_layout(p_workflow text, p_version integer)
RETURNS TABLE (key text, trigger_rule text, has_when boolean, compensate_attempts integer)
LANGUAGE sql STABLE AS $$
    SELECT s.k, coalesce(nullif(s.a, ''), 'all_succeeded'), coalesce(s.w, false), nullif(s.c, 0)
    FROM workflow_versions v,
         unnest(v.step_keys, v.step_after, v.step_when, v.step_compensate) AS s(k, a, w, c)
    WHERE v.workflow = p_workflow AND v.version = p_version
$$;
-- +goose StatementEnd

-- cairn_run_relayout completes the steps that a retry (cairn_run_retry) made
-- runnable again, or that a rerun (cairn_run_rerun) created, with what they know
-- nothing of (both lay steps out through cairn_version_layout): the trigger rules,
-- conditions (to decide again) and compensations of the run's version, counters
-- cleared. A retried run's failure handlers are removed: should it fail again, it
-- compensates anew. It runs as a trigger on the event both write last
-- (run.retried, run.created with rerun_of), in their transaction, so that neither
-- function is copied here to add a few columns.
-- +goose StatementBegin
CREATE FUNCTION cairn_run_relayout()
RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_total   integer;
    v_left    integer;
BEGIN
    SELECT count(*), count(*) FILTER (WHERE status <> 'succeeded') INTO v_total, v_left
      FROM steps WHERE run_id = NEW.run_id AND phase <> 'main';
    IF v_total > 0 THEN
        DELETE FROM step_edges e USING steps s
         WHERE s.run_id = NEW.run_id AND s.phase <> 'main' AND e.run_id = NEW.run_id
           AND (e.to_key = s.key OR e.from_key = s.key);
        DELETE FROM steps WHERE run_id = NEW.run_id AND phase <> 'main';
        UPDATE runs SET steps_total = steps_total - v_total, steps_remaining = greatest(steps_remaining - v_left, 0)
        WHERE id = NEW.run_id;
    END IF;
    UPDATE steps s SET trigger_rule = l.trigger_rule, compensate_attempts = l.compensate_attempts,
        condition = CASE WHEN s.status = 'succeeded' THEN s.condition WHEN l.has_when THEN 'pending' END,
        skip_reason = CASE WHEN s.status = 'succeeded' THEN s.skip_reason END,
        deps_failed = 0, deps_skipped = 0
    FROM runs r, cairn_condition_layout(r.workflow, r.version) l
    WHERE r.id = NEW.run_id AND s.run_id = NEW.run_id AND s.key = l.key;
    RETURN NULL;
END $$;
-- +goose StatementEnd

CREATE TRIGGER events_run_relayout AFTER INSERT ON events FOR EACH ROW
    WHEN (NEW.type = 'run.retried' OR (NEW.type = 'run.created' AND NEW.data ? 'rerun_of'))
    EXECUTE FUNCTION cairn_run_relayout();

-- +goose Down
DROP TRIGGER events_run_relayout ON events;
DROP FUNCTION cairn_run_relayout();
DROP FUNCTION cairn_condition_layout(text, integer);
DROP FUNCTION cairn_run_compensate(uuid);
DROP FUNCTION cairn_condition_decide(uuid, text, boolean, jsonb);
DROP FUNCTION cairn_step_skip(uuid, text, text, text);

-- The functions as the newest earlier migration left them.

-- cairn_run_cancel: as in 00010.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_run_cancel(p_run uuid, p_reason text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_status text;
BEGIN
    SELECT status INTO v_status FROM runs WHERE id = p_run FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'run % not found', p_run USING ERRCODE = 'CA404';
    END IF;
    IF v_status NOT IN ('pending', 'running', 'paused') THEN
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

-- cairn_run_settle: as in 00005.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_run_settle(p_run uuid, p_done integer)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_remaining integer;
    v_paused    boolean;
    v_failed    record;
BEGIN
    UPDATE runs SET steps_remaining = greatest(steps_remaining - p_done, 0)
    WHERE id = p_run AND status IN ('pending', 'running', 'paused')
    RETURNING steps_remaining, status = 'paused' INTO v_remaining, v_paused;
    IF v_remaining IS DISTINCT FROM 0 THEN
        RETURN;
    END IF;
    IF v_paused THEN
        UPDATE steps SET held = false WHERE run_id = p_run AND held;
    END IF;
    SELECT key, last_error INTO v_failed FROM steps
    WHERE run_id = p_run AND status = 'failed'
    ORDER BY finished_at, key LIMIT 1;
    IF FOUND THEN
        UPDATE runs SET status = 'failed', finished_at = now(), pause_reason = NULL,
            error = jsonb_build_object('message', 'step ' || v_failed.key || ' failed',
                                       'step', v_failed.key, 'cause', v_failed.last_error)
        WHERE id = p_run;
        PERFORM cairn_event(p_run, 'run.failed', NULL, NULL, jsonb_build_object('step', v_failed.key));
    ELSE
        UPDATE runs SET status = 'succeeded', finished_at = now(), pause_reason = NULL WHERE id = p_run;
        PERFORM cairn_event(p_run, 'run.succeeded', NULL, NULL, '{}');
    END IF;
END $$;
-- +goose StatementEnd

-- cairn_step_resolve: as in 00010.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_step_resolve(p_run uuid, p_key text, p_outcome text, p_output jsonb, p_error jsonb,
                                   p_reason text DEFAULT NULL)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_status  text;
    v_kind    text;
    v_attempt integer;
    v_ready   integer := 0;
    v_skipped integer := 0;
BEGIN
    IF p_outcome IS NULL OR p_outcome NOT IN ('succeeded', 'failed') THEN
        RAISE EXCEPTION 'cairn_step_resolve: outcome % is not succeeded or failed', p_outcome
            USING ERRCODE = 'CA400';
    END IF;
    SELECT status, wait_kind, attempts INTO v_status, v_kind, v_attempt
      FROM steps WHERE run_id = p_run AND key = p_key FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'step % of run % not found', p_key, p_run USING ERRCODE = 'CA404';
    END IF;
    IF v_status <> 'suspended' THEN
        RAISE EXCEPTION 'step % of run % is %, not waiting', p_key, p_run, v_status USING ERRCODE = 'CAR09';
    END IF;

    UPDATE steps SET status = p_outcome, finished_at = now(),
        output     = CASE WHEN p_outcome = 'succeeded' THEN p_output ELSE output END,
        last_error = CASE WHEN p_outcome = 'failed' THEN p_error ELSE last_error END
    WHERE run_id = p_run AND key = p_key;

    IF p_outcome = 'succeeded' THEN
        -- Its dependents (step rows, before the run's).
        WITH deps AS (
            UPDATE steps s SET deps_remaining = s.deps_remaining - 1,
                status   = CASE WHEN s.deps_remaining = 1 THEN 'ready' ELSE s.status END,
                ready_at = CASE WHEN s.deps_remaining = 1 THEN now() ELSE s.ready_at END
            FROM step_edges e
            WHERE e.run_id = p_run AND e.from_key = p_key
              AND s.run_id = p_run AND s.key = e.to_key AND s.status = 'waiting'
            RETURNING s.status
        )
        SELECT count(*) FILTER (WHERE status = 'ready') INTO v_ready FROM deps;
        PERFORM cairn_event(p_run, 'step.resumed', p_key, v_attempt,
            jsonb_build_object('kind', v_kind, 'outcome', p_outcome, 'reason', p_reason));
        PERFORM cairn_event(p_run, 'step.succeeded', p_key, v_attempt,
            CASE WHEN jsonb_typeof(p_output) = 'object' AND p_output ? '$blob'
                 THEN jsonb_build_object('output', p_output) ELSE '{}'::jsonb END);
        PERFORM cairn_run_settle(p_run, 1);
        IF v_ready > 0 THEN
            PERFORM cairn_wake();
        END IF;
    ELSE
        v_skipped := cairn_skip_dependents(p_run, p_key);
        PERFORM cairn_event(p_run, 'step.resumed', p_key, v_attempt,
            jsonb_build_object('kind', v_kind, 'outcome', p_outcome, 'reason', p_reason));
        PERFORM cairn_event(p_run, 'step.failed', p_key, v_attempt,
            jsonb_build_object('error', p_error));
        PERFORM cairn_run_settle(p_run, 1 + v_skipped);
    END IF;
END $$;
-- +goose StatementEnd

-- cairn_steps_succeed: as in 00003.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_steps_succeed(p_runs uuid[], p_keys text[], p_tokens bigint[],
                                               p_outputs text[], p_log_keys text[])
RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    v_ords  bigint[];
    v_ended uuid[];
    v_ready bigint;
BEGIN
    WITH b AS (
        SELECT * FROM unnest(p_runs, p_keys, p_tokens, p_outputs, p_log_keys)
            WITH ORDINALITY AS b(run_id, key, token, output, log_key, ord)
    ), done AS (
        UPDATE steps s SET status = 'succeeded', output = b.output::jsonb, finished_at = now(),
            lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
        FROM b
        WHERE s.run_id = b.run_id AND s.key = b.key AND s.lease_token = b.token AND s.status = 'running'
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
            status = CASE WHEN s.deps_remaining = dec.n THEN 'ready' ELSE s.status END,
            ready_at = CASE WHEN s.deps_remaining = dec.n THEN now() ELSE s.ready_at END
        FROM dec
        WHERE s.run_id = dec.run_id AND s.key = dec.to_key AND s.status = 'waiting'
        RETURNING s.status
    ), per_run AS (
        SELECT run_id, count(*) AS n FROM done GROUP BY run_id
    ), r AS (
        UPDATE runs SET revision = runs.revision + p.n,
            steps_remaining = greatest(runs.steps_remaining - p.n, 0)
        FROM per_run p WHERE runs.id = p.run_id
        RETURNING runs.id, runs.revision, p.n, runs.steps_remaining
    ), ev AS (
        INSERT INTO events (run_id, seq, type, step_key, attempt, data)
        SELECT d.run_id, r.revision - r.n + row_number() OVER (PARTITION BY d.run_id ORDER BY d.key),
               'step.succeeded', d.key, d.attempts,
               CASE WHEN jsonb_typeof(d.output) = 'object' AND d.output ? '$blob'
                    THEN jsonb_build_object('output', d.output) ELSE '{}'::jsonb END
        FROM done d JOIN r ON r.id = d.run_id
    )
    SELECT coalesce(array_agg(d.ord), '{}'),
           coalesce(array_agg(DISTINCT d.run_id) FILTER (WHERE r.steps_remaining = 0), '{}'),
           (SELECT count(*) FROM deps WHERE deps.status = 'ready')
    INTO v_ords, v_ended, v_ready
    FROM done d JOIN r ON r.id = d.run_id;

    PERFORM cairn_run_settle(x, 0) FROM unnest(v_ended) AS x;
    IF v_ready > 0 THEN
        PERFORM cairn_wake();
    END IF;
    RETURN v_ords;
END $$;
-- +goose StatementEnd

-- cairn_skip_dependents: as in 00001.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_skip_dependents(p_run uuid, p_key text)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_keys text[];
BEGIN
    WITH RECURSIVE d(key) AS (
        SELECT e.to_key FROM step_edges e WHERE e.run_id = p_run AND e.from_key = p_key
        UNION
        SELECT e.to_key FROM step_edges e JOIN d ON e.from_key = d.key WHERE e.run_id = p_run
    ), skipped AS (
        UPDATE steps SET status = 'skipped', finished_at = now(),
            last_error = jsonb_build_object('message', 'upstream step ' || p_key || ' did not succeed')
        WHERE run_id = p_run AND key IN (SELECT key FROM d) AND status IN ('waiting', 'ready')
        RETURNING key
    )
    SELECT coalesce(array_agg(key ORDER BY key), '{}') INTO v_keys FROM skipped;
    IF cardinality(v_keys) > 0 THEN
        PERFORM cairn_event(p_run, 'step.skipped', NULL, NULL,
            jsonb_build_object('steps', to_jsonb(v_keys), 'because', p_key));
    END IF;
    RETURN cardinality(v_keys);
END $$;
-- +goose StatementEnd

ALTER TABLE workflow_versions DROP CONSTRAINT workflow_versions_conditions_check,
    DROP COLUMN on_failure_max_attempts, DROP COLUMN on_failure_keys, DROP COLUMN step_compensate,
    DROP COLUMN step_when, DROP COLUMN step_after;
DROP INDEX steps_condition_idx;
ALTER TABLE steps DROP CONSTRAINT steps_compensates_check,
    DROP COLUMN compensate_attempts, DROP COLUMN compensates, DROP COLUMN phase, DROP COLUMN skip_reason,
    DROP COLUMN condition, DROP COLUMN deps_skipped, DROP COLUMN deps_failed, DROP COLUMN trigger_rule;
ALTER TABLE runs DROP CONSTRAINT runs_status_check;
ALTER TABLE runs ADD CONSTRAINT runs_status_check
    CHECK (status IN ('pending', 'running', 'paused', 'succeeded', 'failed', 'canceled'));
