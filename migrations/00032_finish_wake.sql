-- +goose Up
-- cairn_steps_succeed(…, p_wake) is 00029's body that wakes the dispatchers
-- (cairn_wake) only when p_wake is true, and says how many steps its successes
-- made ready (ready) beside the rows written (ords). A finish that leases the
-- dependents it made ready (catalog.StepFinishClaim) passes false and wakes them
-- itself when it leased fewer than became ready: a wake-up for steps already
-- leased made every dispatcher poll for nothing (two queries a step, one run at a
-- time). The five-argument function, which older servers call during a rolling
-- upgrade, is the new one with p_wake true.
-- +goose StatementBegin
CREATE FUNCTION cairn_steps_succeed(p_runs uuid[], p_keys text[], p_tokens bigint[],
                                    p_outputs text[], p_log_keys text[], p_wake boolean,
                                    OUT ords bigint[], OUT ready bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_ended     uuid[];
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
        WHERE s.run_id = b.run_id AND s.key = b.key AND s.lease_token = b.token
          AND (s.status = 'running') IS TRUE
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
        SELECT run_id, count(*) AS n, array_agg(key ORDER BY key) AS keys,
               array_agg(attempts ORDER BY key) AS atts, array_agg(output ORDER BY key) AS outs
        FROM done GROUP BY run_id
    ), r AS (
        UPDATE runs SET revision = runs.revision + p.n,
            steps_remaining = greatest(runs.steps_remaining - p.n, 0)
        FROM per_run p WHERE runs.id = p.run_id
        RETURNING runs.id, runs.revision, p.n, runs.steps_remaining, p.keys, p.atts, p.outs
    ), ev AS (
        INSERT INTO events (run_id, seq, type, step_key, attempt, data)
        SELECT r.id, r.revision - r.n + k.ord, 'step.succeeded', k.key, k.att,
               CASE WHEN jsonb_typeof(k.output) = 'object' AND k.output ? '$blob'
                    THEN jsonb_build_object('output', k.output) ELSE '{}'::jsonb END
        FROM r CROSS JOIN LATERAL unnest(r.keys, r.atts, r.outs) WITH ORDINALITY AS k(key, att, output, ord)
    )
    SELECT (SELECT coalesce(array_agg(d.ord), '{}') FROM done d),
           (SELECT coalesce(array_agg(r.id ORDER BY r.id), '{}') FROM r WHERE r.steps_remaining = 0),
           (SELECT count(*) FROM deps WHERE deps.status = 'ready'),
           (SELECT coalesce(array_agg(deps.run_id ORDER BY deps.run_id, deps.key), '{}') FROM deps
             WHERE deps.status = 'waiting' AND deps.deps_remaining = 0),
           (SELECT coalesce(array_agg(deps.key ORDER BY deps.run_id, deps.key), '{}') FROM deps
             WHERE deps.status = 'waiting' AND deps.deps_remaining = 0)
    INTO ords, v_ended, ready, v_skip_runs, v_skip_keys;

    PERFORM cairn_run_settle(x, 0) FROM unnest(v_ended) AS x;
    FOR i IN 1 .. coalesce(cardinality(v_skip_runs), 0) LOOP
        PERFORM cairn_run_settle(v_skip_runs[i], cairn_step_skip(v_skip_runs[i], v_skip_keys[i], 'no_upstream_failed', NULL));
    END LOOP;
    IF ready > 0 AND p_wake THEN
        PERFORM cairn_wake();
    END IF;
END $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_steps_succeed(p_runs uuid[], p_keys text[], p_tokens bigint[],
                                               p_outputs text[], p_log_keys text[])
RETURNS bigint[] LANGUAGE sql AS $$
    SELECT s.ords FROM cairn_steps_succeed(p_runs, p_keys, p_tokens, p_outputs, p_log_keys, true) AS s;
$$;
-- +goose StatementEnd

-- +goose Down
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
        WHERE s.run_id = b.run_id AND s.key = b.key AND s.lease_token = b.token
          AND (s.status = 'running') IS TRUE
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
        SELECT run_id, count(*) AS n, array_agg(key ORDER BY key) AS keys,
               array_agg(attempts ORDER BY key) AS atts, array_agg(output ORDER BY key) AS outs
        FROM done GROUP BY run_id
    ), r AS (
        UPDATE runs SET revision = runs.revision + p.n,
            steps_remaining = greatest(runs.steps_remaining - p.n, 0)
        FROM per_run p WHERE runs.id = p.run_id
        RETURNING runs.id, runs.revision, p.n, runs.steps_remaining, p.keys, p.atts, p.outs
    ), ev AS (
        INSERT INTO events (run_id, seq, type, step_key, attempt, data)
        SELECT r.id, r.revision - r.n + k.ord, 'step.succeeded', k.key, k.att,
               CASE WHEN jsonb_typeof(k.output) = 'object' AND k.output ? '$blob'
                    THEN jsonb_build_object('output', k.output) ELSE '{}'::jsonb END
        FROM r CROSS JOIN LATERAL unnest(r.keys, r.atts, r.outs) WITH ORDINALITY AS k(key, att, output, ord)
    )
    SELECT (SELECT coalesce(array_agg(d.ord), '{}') FROM done d),
           (SELECT coalesce(array_agg(r.id ORDER BY r.id), '{}') FROM r WHERE r.steps_remaining = 0),
           (SELECT count(*) FROM deps WHERE deps.status = 'ready'),
           (SELECT coalesce(array_agg(deps.run_id ORDER BY deps.run_id, deps.key), '{}') FROM deps
             WHERE deps.status = 'waiting' AND deps.deps_remaining = 0),
           (SELECT coalesce(array_agg(deps.key ORDER BY deps.run_id, deps.key), '{}') FROM deps
             WHERE deps.status = 'waiting' AND deps.deps_remaining = 0)
    INTO v_ords, v_ended, v_ready, v_skip_runs, v_skip_keys;

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
-- +goose StatementBegin
DROP FUNCTION cairn_steps_succeed(uuid[], text[], bigint[], text[], text[], boolean);
-- +goose StatementEnd
