-- Steps and finishing: how an attempt ends and what follows from it. A claimed step
-- (catalog/lease.go's claim, plain SQL) runs; its attempt ends through
-- cairn_steps_succeed (a batch of successes) or cairn_step_finish (every other end),
-- both fenced by the lease token; cairn_sweep_next takes back the leases of dead
-- dispatchers. What follows an end: dependents readied, or settled by their trigger
-- rule (cairn_skip_dependents), the run counted down and ended (cairn_run_settle),
-- failure handlers laid out (cairn_run_compensate). Go callers: catalog/lease.go,
-- catalog/wait.go, catalog/flow.go.
--
-- Lock order, as in every writer of a run (run_control.sql): the run's advisory
-- lock (shared here, cairn_runs_share, taken by the Go statement), the steps in key
-- order, then the run's row.
--
-- This folder is the current definition of every cairn_* function and trigger; a
-- change is an edit here followed by `go run ./migrations/gen NAME` (README.md).

-- cairn_event appends an event to a run, bumping its revision.
CREATE OR REPLACE FUNCTION cairn_event(p_run uuid, p_type text, p_step text, p_attempt integer, p_data jsonb)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_seq bigint;
BEGIN
    UPDATE runs SET revision = revision + 1 WHERE id = p_run RETURNING revision INTO v_seq;
    INSERT INTO events (run_id, seq, type, step_key, attempt, data)
    VALUES (p_run, v_seq, p_type, p_step, p_attempt, coalesce(p_data, '{}'));
    RETURN v_seq;
END $$;

-- cairn_step_finish records the end of an attempt that did not succeed (successes go
-- through cairn_steps_succeed), fenced by its lease token: false, and nothing
-- written, when p_token is not the step's current lease. p_outcome is one of:
--   failed, timed_out  the handler failed: the attempt counts against max_attempts;
--   interrupted        its dispatcher died (cairn_sweep_next took the lease back, code
--                      lease_expired): the attempt does not count; interruptions
--                      are bounded on their own (below);
--   handback           handed back at a dispatcher's shutdown: recorded as
--                      interrupted, does not count, ready at once, last_error kept;
--   infra_failed       Cairn's own infrastructure failed, not the handler: the
--                      attempt is failed but does not count.
-- The step is then ready again (at p_retry_at, never before now) when the attempt
-- did not count, or p_retryable with counted attempts left. Otherwise, with
-- on_exhausted pause, it is parked: ready with a fresh budget (counted_attempts 0)
-- and its last error, held; the run's other unfinished steps (suspended ones too)
-- are held and the run is paused (pause_reason exhausted, a run.paused event naming
-- the step, its attempt and its error) until an operator resumes or cancels it.
-- Else it fails: its dependents are settled (cairn_skip_dependents) and the run may
-- end (cairn_run_settle).
--
-- A crash never fails a run, but a handler that kills its dispatcher every time
-- (out of memory, a poison pill) must stop taking servers down: when the step has
-- been interrupted max_interruptions times in a row (cairn_step_max_interruptions),
-- the interruption that reaches the bound fails it (or parks it) with code
-- interrupted_too_often. "In a row" counts the step's interrupted attempts after
-- the newest one that ended otherwise and counted, and after the newest
-- interrupted_too_often: a run retried or a step resumed after that failure gets a
-- fresh bound.
--
-- Events: step.failed, run.paused, step.handed_back or step.retrying. Raises CA400
-- for another outcome. Go calls it through catalog.StepFinishBatch
-- (catalog/lease.go); the sweep calls it with interrupted.
CREATE OR REPLACE FUNCTION cairn_step_finish(p_run uuid, p_key text, p_token bigint, p_outcome text,
    p_output jsonb, p_error jsonb, p_retryable boolean, p_retry_at timestamptz, p_log_key text)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    -- The attempt does not use up one of max_attempts.
    v_free     boolean := p_outcome IN ('handback', 'infra_failed', 'interrupted');
    v_attempt_status text := CASE p_outcome WHEN 'handback' THEN 'interrupted'
                                            WHEN 'infra_failed' THEN 'failed'
                                            ELSE p_outcome END;
    v_ready_at timestamptz := CASE WHEN p_outcome = 'handback' THEN now()
                                   ELSE greatest(coalesce(p_retry_at, now()), now()) END;
    v_error    jsonb := p_error;
    v_next     text;     -- the step's next status: ready, failed, or parked (ready and held)
    v_attempt  integer;
    v_counted  integer;
    v_max      integer;
    v_exhausted text;
    v_parent   text;
    v_in_row   integer;
    v_bound    integer;
    v_type     text;
    v_data     jsonb;
    v_rev      bigint;
BEGIN
    IF p_outcome IS NULL OR p_outcome NOT IN ('failed', 'timed_out', 'interrupted', 'handback', 'infra_failed') THEN
        RAISE EXCEPTION 'cairn_step_finish: outcome % is not one it takes (successes go through cairn_steps_succeed)', p_outcome
            USING ERRCODE = 'CA400';
    END IF;

    -- The row's current values, under its lock.
    SELECT attempts, counted_attempts, max_attempts, on_exhausted, map_parent
      INTO v_attempt, v_counted, v_max, v_exhausted, v_parent
      FROM steps
     WHERE run_id = p_run AND key = p_key AND lease_token = p_token AND status = 'running'
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false; -- lease lost
    END IF;

    -- The decision, once.
    v_next := CASE WHEN v_free OR (p_retryable AND v_counted < v_max) THEN 'ready'
                   WHEN v_exhausted = 'pause' THEN 'parked'
                   ELSE 'failed' END;
    IF p_outcome = 'interrupted' THEN
        SELECT count(*) + 1 INTO v_in_row FROM attempts a
        WHERE a.run_id = p_run AND a.step_key = p_key AND a.number < v_attempt
          AND a.status = 'interrupted' AND a.error->>'code' = 'lease_expired'
          AND a.number > coalesce((
                SELECT max(b.number) FROM attempts b
                WHERE b.run_id = p_run AND b.step_key = p_key AND b.number < v_attempt
                  AND ((b.counted AND b.status IN ('succeeded', 'failed', 'timed_out'))
                       OR b.error->>'code' = 'interrupted_too_often')), 0);
        v_bound := cairn_step_max_interruptions(p_run, p_key, v_parent);
        IF v_in_row >= v_bound THEN
            v_next := CASE WHEN v_exhausted = 'pause' THEN 'parked' ELSE 'failed' END;
            v_error := jsonb_build_object(
                'message', format('interrupted %s times in a row: the dispatcher running the step stopped (killed, out of memory, its machine lost) during each of its last %s attempts; max_interruptions is %s',
                                  v_in_row, v_in_row, v_bound),
                'code', 'interrupted_too_often', 'retryable', false,
                'interruptions', v_in_row, 'last', p_error);
        END IF;
    END IF;

    UPDATE steps SET
        status           = CASE WHEN v_next = 'failed' THEN 'failed' ELSE 'ready' END,
        last_error       = CASE WHEN p_outcome = 'handback' THEN last_error ELSE v_error END,
        counted_attempts = CASE WHEN v_next = 'parked' THEN 0 ELSE counted_attempts - v_free::integer END,
        ready_at         = CASE v_next WHEN 'ready' THEN v_ready_at WHEN 'parked' THEN now() ELSE ready_at END,
        finished_at      = CASE WHEN v_next = 'failed' THEN now() ELSE finished_at END,
        held             = held OR v_next = 'parked',
        lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
    WHERE run_id = p_run AND key = p_key;

    UPDATE attempts SET status = v_attempt_status, finished_at = now(), error = v_error,
        log_key = p_log_key, counted = NOT v_free
    WHERE run_id = p_run AND step_key = p_key AND number = v_attempt;

    IF v_next = 'failed' THEN
        v_type := 'step.failed';
        v_data := jsonb_build_object('attempt_status', v_attempt_status, 'error', v_error);
    ELSIF v_next = 'parked' THEN
        -- The run is paused: hold its other unfinished steps (this step's lock is
        -- held already; the run's row comes after the steps).
        UPDATE steps SET held = true
        WHERE run_id = p_run AND status IN ('waiting', 'ready', 'running', 'suspended') AND NOT held;
        v_type := 'run.paused';
        v_data := jsonb_build_object('pause_reason', 'exhausted', 'step', p_key,
                                     'attempt_status', v_attempt_status, 'error', v_error);
    ELSIF p_outcome = 'handback' THEN
        v_type := 'step.handed_back';
        v_data := '{}'::jsonb;
    ELSE
        v_type := 'step.retrying';
        v_data := jsonb_build_object('attempt_status', v_attempt_status, 'error', v_error,
                                     'ready_at', v_ready_at, 'counted', NOT v_free);
    END IF;

    -- One update of the run: its revision (the event's seq), for a failed step the
    -- count of steps left, for a parked one its pause.
    UPDATE runs SET revision = revision + 1,
        steps_remaining = greatest(steps_remaining - (v_next = 'failed')::integer, 0),
        status = CASE WHEN v_next = 'parked' THEN 'paused' ELSE status END,
        pause_reason = CASE WHEN v_next = 'parked' THEN 'exhausted' ELSE pause_reason END
    WHERE id = p_run
    RETURNING revision INTO v_rev;
    INSERT INTO events (run_id, seq, type, step_key, attempt, data)
    VALUES (p_run, v_rev, v_type, p_key, v_attempt, v_data);

    IF v_next = 'failed' THEN
        -- Skip the dependents, count them as done too, maybe end the run.
        PERFORM cairn_run_settle(p_run, cairn_skip_dependents(p_run, p_key));
    ELSIF v_next = 'ready' THEN
        PERFORM cairn_wake();
    END IF;
    RETURN true;
END $$;

-- cairn_step_max_interruptions is the max_interruptions of step p_key of run
-- p_run: its retry policy's, read from the run's version's definition (a map
-- instance's is its map step's, p_map_parent), 5 when unset
-- (bundle.DefaultMaxInterruptions; catalog TestMaxInterruptionsDefault holds
-- the two equal). Only an interruption reads it.
CREATE OR REPLACE FUNCTION cairn_step_max_interruptions(p_run uuid, p_key text, p_map_parent text)
RETURNS integer LANGUAGE sql STABLE AS $$
    SELECT coalesce((
        SELECT (x.d->'retry'->>'max_interruptions')::integer
        FROM runs r
        JOIN workflow_versions v ON v.workflow = r.workflow AND v.version = r.version
        CROSS JOIN LATERAL (
            SELECT s FROM jsonb_array_elements(v.definition->'steps') s
            UNION ALL
            SELECT s->'compensate' FROM jsonb_array_elements(v.definition->'steps') s WHERE s ? 'compensate'
            UNION ALL
            SELECT s FROM jsonb_array_elements(coalesce(v.definition->'on_failure', '[]'::jsonb)) s
        ) x(d)
        WHERE r.id = p_run AND x.d->>'key' = coalesce(p_map_parent, p_key)
        LIMIT 1), 5)
$$;

-- The five-argument cairn_steps_succeed, which older servers call during a rolling
-- upgrade, is the six-argument one with p_wake true.
CREATE OR REPLACE FUNCTION cairn_steps_succeed(p_runs uuid[], p_keys text[], p_tokens bigint[],
                                               p_outputs text[], p_log_keys text[])
RETURNS bigint[] LANGUAGE sql AS $$
    SELECT s.ords FROM cairn_steps_succeed(p_runs, p_keys, p_tokens, p_outputs, p_log_keys, true) AS s;
$$;

-- cairn_steps_succeed records a batch of successful attempts, set-based: a group
-- commit in a handful of statements whatever the batch size. Each item is fenced by
-- its lease token; ords are the ordinals (1-based) of the items written, the others
-- lost their lease. Dependents are readied by how many of their needs the batch
-- completed (one whose upstream all succeeded but whose rule is any_failed is
-- skipped instead, no_upstream_failed); each run gets one revision bump for its
-- events, and a run left with no step to go ends (cairn_run_settle). ready says how
-- many steps the successes made ready. The dispatchers are woken (cairn_wake) only
-- when p_wake is true: a finish that leases the dependents it made ready
-- (catalog.StepFinishClaim) passes false and wakes them itself when it leased fewer
-- than became ready (a wake-up for steps already leased made every dispatcher poll
-- for nothing).
--
-- Its plan is generic, which explains two shapes. The steps it finishes are found
-- with "(status = 'running') IS TRUE": no partial index matches it, so each row of
-- the batch is looked up by the primary key (with status = 'running' PostgreSQL
-- took steps_lease_expiry_idx and joined every running step to every row of the
-- batch). And no CTE is joined to another: PostgreSQL estimates a CTE at a few rows
-- and joined two by a nested loop, so the events take their keys, attempts and
-- outputs from arrays that per_run gathers and r returns, and the result reads the
-- finished steps and the ended runs apart.
--
-- The runs' rows are locked in ascending order of their IDs (lk), as
-- cairn_step_finish's batches (sorted by run) and the claims (by primary key) take
-- them: in the order of the update's join, two finishing batches over the same runs
-- met in a circle.
CREATE OR REPLACE FUNCTION cairn_steps_succeed(p_runs uuid[], p_keys text[], p_tokens bigint[],
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
    ), lk AS (
        SELECT runs.id FROM runs WHERE runs.id IN (SELECT per_run.run_id FROM per_run)
        ORDER BY runs.id FOR NO KEY UPDATE
    ), r AS (
        UPDATE runs SET revision = runs.revision + p.n,
            steps_remaining = greatest(runs.steps_remaining - p.n, 0)
        FROM per_run p JOIN lk ON lk.id = p.run_id WHERE runs.id = p.run_id
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

-- cairn_primary_since is when this database started serving as the primary it
-- is: its start (pg_postmaster_start_time()), or, when later, when a caller
-- first saw its current WAL timeline, which a promotion starts (a standby that
-- started long ago keeps its start time when it is promoted). It records that
-- first sighting in primary_timelines; the sweepers call it every round, so it
-- is within a round of the promotion. A timeline the table does not know yet is
-- seen now.
CREATE OR REPLACE FUNCTION cairn_primary_since()
RETURNS timestamptz LANGUAGE plpgsql AS $$
DECLARE
    v_timeline integer;
    v_seen     timestamptz;
BEGIN
    IF pg_is_in_recovery() THEN
        -- A standby: what it says of its WAL is not a primary's.
        RAISE EXCEPTION 'the database is a standby: it only reads' USING ERRCODE = 'read_only_sql_transaction';
    END IF;
    -- The WAL file name's first eight hex digits are the timeline of the WAL
    -- being written.
    v_timeline := ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::integer;
    INSERT INTO primary_timelines (timeline, seen_at) VALUES (v_timeline, now())
    ON CONFLICT (timeline) DO NOTHING;
    SELECT seen_at INTO v_seen FROM primary_timelines WHERE timeline = v_timeline;
    RETURN greatest(pg_postmaster_start_time(), coalesce(v_seen, now()));
END $$;

-- cairn_sweep_next takes back one lease that expired (its dispatcher died or lost
-- the database): the attempt ends interrupted, code lease_expired
-- (cairn_step_finish, which does not count it against max_attempts), and the step
-- is ready again. It returns 1 when it swept a lease, 0 when none is due, -1 when
-- the due ones it found were busy; the caller makes one transaction of each call
-- (catalog.StepSweep): one run's locks at a time. Safe to run from every
-- dispatcher at once.
--
-- It keeps the lock order (run_control.sql): the step is locked without waiting
-- (SKIP LOCKED), then the run's shared advisory locks and its ancestors' are tried
-- without waiting (cairn_runs_try_share): a run that is being paused, canceled or
-- retried is left to the next round, so the sweeper never waits where it could
-- meet a run's controller or a finisher in a circle.
--
-- No lease is swept until p_grace after the database itself started serving as
-- the primary it is (cairn_primary_since): while PostgreSQL is down no
-- dispatcher can renew its leases, so every lease runs out during a long enough
-- outage although its owner is alive; a server started just after the database
-- came back has seen no error of its own and would take every step from the
-- servers that lived through the outage. The database's memory is the one every
-- dispatcher shares.
--
-- A lease whose owner renewed its own liveness within the last lease TTL
-- (dispatchers.lease_until still ahead) is left to it until it is p_grace past its
-- expiry: its row was locked by other transactions at the owner's renewals (the
-- heartbeat skips locked rows), or the owner no longer holds it (a lease a live
-- dispatcher forgot is still swept, later).
CREATE OR REPLACE FUNCTION cairn_sweep_next(p_grace interval)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    r      record;
    v_busy boolean := false;
BEGIN
    IF now() < cairn_primary_since() + p_grace THEN
        RETURN 0;
    END IF;
    FOR r IN
        SELECT s.run_id, s.key, s.lease_token FROM steps s
        WHERE s.status = 'running' AND s.lease_expires_at < now()
          AND (s.lease_expires_at < now() - p_grace
               OR NOT EXISTS (SELECT 1 FROM dispatchers d
                              WHERE d.id = s.lease_owner AND d.lease_until > now()))
        ORDER BY s.lease_expires_at
        LIMIT 16
        FOR UPDATE OF s SKIP LOCKED
    LOOP
        IF cairn_runs_try_share(r.run_id) THEN
            PERFORM cairn_step_finish(r.run_id, r.key, r.lease_token, 'interrupted', NULL,
                jsonb_build_object('message', 'lease expired: the dispatcher holding the step stopped or lost the database',
                                   'code', 'lease_expired'),
                true, now(), NULL);
            RETURN 1;
        END IF;
        v_busy := true;
    END LOOP;
    RETURN CASE WHEN v_busy THEN -1 ELSE 0 END;
END $$;

-- cairn_queue_timeout_next fails one ready step (not held: a paused run's wait is
-- not the queue's) whose queue_timeout has passed: terminal, last_error
-- {"message", "code": "queue_timeout"}, its dependents skipped, step.failed, the
-- run may end. Like cairn_wake_next it keeps the lock order (the step SKIP LOCKED,
-- the run's shared locks tried without waiting, then the run's row) and answers 1
-- when it failed one, 0 when none is due, -1 when the due ones are busy; the caller
-- makes one transaction of each call (catalog.QueueTimeouts).
CREATE OR REPLACE FUNCTION cairn_queue_timeout_next()
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    r      record;
    v_err  jsonb;
    v_skip integer;
BEGIN
    SELECT run_id, key, attempts, queue_timeout_s INTO r FROM steps
    WHERE status = 'ready' AND queue_timeout_s IS NOT NULL AND NOT held
      AND ready_at + make_interval(secs => queue_timeout_s) <= now()
    ORDER BY ready_at
    LIMIT 1
    FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    IF NOT cairn_runs_try_share(r.run_id) THEN
        RETURN -1;
    END IF;
    v_err := jsonb_build_object('message',
        format('the step waited over its queue_timeout (%ss) to start', r.queue_timeout_s),
        'code', 'queue_timeout');
    UPDATE steps SET status = 'failed', finished_at = now(), last_error = v_err
    WHERE run_id = r.run_id AND key = r.key;
    v_skip := cairn_skip_dependents(r.run_id, r.key);
    PERFORM cairn_event(r.run_id, 'step.failed', r.key, r.attempts, jsonb_build_object('error', v_err));
    PERFORM cairn_run_settle(r.run_id, 1 + v_skip);
    RETURN 1;
END $$;

-- cairn_step_resolve ends a suspended step: p_outcome succeeded (output p_output;
-- its dependents whose needs are all met become ready, one whose rule is any_failed
-- is skipped, no_upstream_failed) or failed (terminal whatever its retry policy:
-- last_error p_error; its dependents are settled). Events: step.resumed {kind,
-- outcome, reason} then step.succeeded or step.failed; the run may end. p_reason
-- says why (sleep_done, signal, timeout, approved, …). Raises CA404 for no such
-- step, CAR09 when the step is not suspended (a late or repeated completion;
-- nothing is written), CA400 for another outcome.
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

-- cairn_step_skip skips a waiting or ready step for p_reason (condition_false,
-- no_upstream_failed), p_because naming the step that decided it if any
-- (step.skipped), and settles its dependents. Returns how many steps it skipped (0
-- when the step was not waiting or ready); the caller settles the run with it.
CREATE OR REPLACE FUNCTION cairn_step_skip(p_run uuid, p_key text, p_reason text, p_because text)
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

-- cairn_skip_dependents settles the dependents of a step that ended without
-- succeeding (failed, canceled or skipped): each counts it (deps_failed or
-- deps_skipped) and applies its trigger rule. all_succeeded: skipped at once
-- (upstream_failed or upstream_skipped); none_failed: skipped at once when it
-- failed (upstream_failed); when no upstream is left: all_done and none_failed are
-- ready, any_failed is ready when one failed, else skipped (no_upstream_failed).
-- Skipped dependents settle theirs in turn. One step.skipped event names them all
-- (steps, because, reasons). Returns how many it skipped.
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

-- cairn_run_settle counts p_done more steps of a run as terminal; when none remain,
-- the run ends: failed if a step failed (after its failure handlers, which
-- cairn_run_compensate lays out: the run is compensating meanwhile), else
-- succeeded. With p_done = 0 it only ends a run that has no steps left, reading the
-- run's row FOR UPDATE rather than writing it; a run that succeeds takes its
-- run.succeeded event's revision in the update of its status (two writes of the
-- row at a run's end, not four).
--
-- Its row is locked FOR NO KEY UPDATE, as cairn_run_cancel's (run_control.sql).
CREATE OR REPLACE FUNCTION cairn_run_settle(p_run uuid, p_done integer)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_remaining integer;
    v_status    text;
    v_failed    record;
    v_error     jsonb;
    v_handlers  jsonb;
    v_n         integer;
    v_seq       bigint;
BEGIN
    IF p_done = 0 THEN
        -- Nothing to count: the row is read and locked, not rewritten unchanged.
        SELECT steps_remaining, status INTO v_remaining, v_status FROM runs
        WHERE id = p_run AND status IN ('pending', 'running', 'paused', 'compensating')
        FOR NO KEY UPDATE;
    ELSE
        UPDATE runs SET steps_remaining = greatest(steps_remaining - p_done, 0)
        WHERE id = p_run AND status IN ('pending', 'running', 'paused', 'compensating')
        RETURNING steps_remaining, status INTO v_remaining, v_status;
    END IF;
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
        -- The run.succeeded event's revision in the same write (as cairn_event).
        UPDATE runs SET status = 'succeeded', finished_at = now(), pause_reason = NULL,
            revision = revision + 1
        WHERE id = p_run RETURNING revision INTO v_seq;
        INSERT INTO events (run_id, seq, type) VALUES (p_run, v_seq, 'run.succeeded');
    END IF;
END $$;

-- cairn_run_compensate lays out the failure handlers of a run that would end
-- failed: one step per succeeded step of the DAG that has a compensation (key
-- compensate-<key>, needs that step: its output is in the envelope's deps),
-- chained in reverse completion order (each after the previous one, all_done: a
-- failed compensation does not stop the next), then the version's on_failure steps
-- after the last compensation. Returns how many steps it added.
CREATE OR REPLACE FUNCTION cairn_run_compensate(p_run uuid)
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
