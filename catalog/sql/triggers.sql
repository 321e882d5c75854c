-- [from 00014_conditions.sql]
-- cairn_run_relayout completes the steps that a retry (cairn_run_retry) made
-- runnable again, or that a rerun (cairn_run_rerun) created, with what they know
-- nothing of (both lay steps out through cairn_version_layout): the trigger rules,
-- conditions (to decide again) and compensations of the run's version, counters
-- cleared. A retried run's failure handlers are removed: should it fail again, it
-- compensates anew. It runs as a trigger on the event both write last
-- (run.retried, run.created with rerun_of), in their transaction, so that neither
-- function is copied here to add a few columns.
CREATE OR REPLACE FUNCTION cairn_run_relayout()
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

-- [from 00014_conditions.sql]
-- TODO comment
CREATE OR REPLACE TRIGGER events_run_relayout AFTER INSERT ON events FOR EACH ROW
    WHEN (NEW.type = 'run.retried' OR (NEW.type = 'run.created' AND NEW.data ? 'rerun_of'))
    EXECUTE FUNCTION cairn_run_relayout();

-- [from 00015_map.sql]
-- TODO comment
CREATE OR REPLACE FUNCTION cairn_child_ended()
RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cairn_child_resolve(NEW.id);
    RETURN NULL;
END $$;

-- [from 00015_map.sql]
-- TODO comment
CREATE OR REPLACE TRIGGER runs_child_ended AFTER UPDATE OF status ON runs
    FOR EACH ROW
    WHEN (NEW.parent_step IS NOT NULL AND NEW.status IN ('succeeded', 'failed', 'canceled')
          AND OLD.status NOT IN ('succeeded', 'failed', 'canceled'))
    EXECUTE FUNCTION cairn_child_ended();

-- [from 00015_map.sql]
-- cairn_children_follow makes a parent's children follow it: canceled, they are
-- canceled (those not ended); paused by an operator (pause_reason run), the pending
-- and running ones are paused (actor parent:<id>); resumed, the children paused that
-- way are resumed. Each child's own children follow it in turn. The children are
-- locked as they are chosen (a child that ends meanwhile is skipped, not an error
-- that would undo the parent's change).
CREATE OR REPLACE FUNCTION cairn_children_follow()
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

-- [from 00015_map.sql]
-- TODO comment
CREATE OR REPLACE TRIGGER runs_children_follow AFTER UPDATE OF status, pause_reason ON runs
    FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.pause_reason IS DISTINCT FROM NEW.pause_reason)
    EXECUTE FUNCTION cairn_children_follow();

-- [from 00020_live_log.sql]
-- TODO comment
CREATE OR REPLACE FUNCTION cairn_span_outbox_run() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO span_outbox (run_id) VALUES (NEW.id);
    RETURN NULL;
END
$$;

-- [from 00020_live_log.sql]
-- TODO comment
CREATE OR REPLACE TRIGGER runs_span_outbox AFTER UPDATE OF status ON runs FOR EACH ROW
    WHEN (NEW.status = 'canceled' AND OLD.status <> 'canceled')
    EXECUTE FUNCTION cairn_span_outbox_run();

-- [from 00020_live_log.sql]
-- TODO comment
CREATE OR REPLACE FUNCTION cairn_span_outbox_step() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO span_outbox (run_id, step_key) VALUES (NEW.run_id, NEW.key);
    RETURN NULL;
END
$$;

-- [from 00020_live_log.sql]
-- TODO comment
CREATE OR REPLACE TRIGGER steps_span_outbox AFTER UPDATE OF status ON steps FOR EACH ROW
    WHEN (OLD.status = 'suspended' AND NEW.status IN ('succeeded', 'failed', 'canceled', 'skipped'))
    EXECUTE FUNCTION cairn_span_outbox_step();

-- [from 00021_flow_fair_rate.sql]
-- TODO comment
CREATE OR REPLACE FUNCTION cairn_step_flow_inherit()
RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    f jsonb;
BEGIN
    IF NEW.map_parent IS NOT NULL THEN
        SELECT p.conc_name, p.conc_key, p.conc_limit, p.rate_name, p.rate_key, p.rate_limit, p.rate_per_s,
               p.priority, p.runs_on, p.queue_timeout_s
        INTO NEW.conc_name, NEW.conc_key, NEW.conc_limit, NEW.rate_name, NEW.rate_key, NEW.rate_limit,
             NEW.rate_per_s, NEW.priority, NEW.runs_on, NEW.queue_timeout_s
        FROM steps p WHERE p.run_id = NEW.run_id AND p.key = NEW.map_parent;
        RETURN NEW;
    END IF;
    SELECT r.handler_flow -> NEW.key INTO f FROM runs r WHERE r.id = NEW.run_id;
    IF f IS NOT NULL THEN
        NEW.conc_name := f ->> 'n';
        NEW.conc_key := f ->> 'k';
        NEW.conc_limit := (f ->> 'l')::integer;
        NEW.rate_name := f ->> 'rn';
        NEW.rate_key := f ->> 'rk';
        NEW.rate_limit := (f ->> 'rl')::integer;
        NEW.rate_per_s := (f ->> 'rp')::float8;
        NEW.priority := coalesce((f ->> 'p')::smallint, NEW.priority);
        NEW.runs_on := CASE WHEN f ? 't' THEN ARRAY(SELECT jsonb_array_elements_text(f -> 't')) END;
        NEW.queue_timeout_s := (f ->> 'q')::float8;
    END IF;
    RETURN NEW;
END $$;

-- [from 00021_flow_fair_rate.sql]
-- TODO comment
CREATE OR REPLACE TRIGGER steps_flow_inherit BEFORE INSERT ON steps
    FOR EACH ROW WHEN (NEW.map_parent IS NOT NULL OR NEW.phase <> 'main')
    EXECUTE FUNCTION cairn_step_flow_inherit();

-- [from 00030_hot_checks.sql]
-- TODO comment
CREATE OR REPLACE FUNCTION cairn_steps_check_failed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'new row for relation "steps" violates check trigger "steps_checks"'
        USING ERRCODE = 'check_violation', TABLE = 'steps', CONSTRAINT = 'steps_checks',
              DETAIL = format('Failing row: %s.', to_jsonb(NEW)),
              HINT = 'The checks are those of the trigger steps_checks (migrations/00030_hot_checks.sql).';
END $$;

-- [from 00034_insert_checks.sql]
-- TODO comment
CREATE OR REPLACE TRIGGER steps_checks
AFTER UPDATE OF approval_required, approvals, callback_outcome, compensate_attempts, phase, compensates, conc_name, conc_key, conc_limit, condition, deps_failed, deps_skipped, key, map_parent, map_index, max_attempts, on_exhausted, on_timeout, priority, queue_timeout_s, rate_name, rate_key, rate_limit, rate_per_s, trigger_rule, wait_kind
ON steps FOR EACH ROW
WHEN (
       ((NEW.approval_required >= 1)) IS FALSE -- steps_approval_required_check
    OR ((NEW.approvals >= 0)) IS FALSE -- steps_approvals_check
    OR ((NEW.callback_outcome = ANY (ARRAY['succeeded'::text, 'failed'::text]))) IS FALSE -- steps_callback_outcome_check
    OR ((NEW.compensate_attempts >= 1)) IS FALSE -- steps_compensate_attempts_check
    OR (((NEW.phase = 'compensate'::text) = (NEW.compensates IS NOT NULL))) IS FALSE -- steps_compensates_check
    OR ((((NEW.conc_name IS NULL) = (NEW.conc_key IS NULL)) AND ((NEW.conc_name IS NULL) = (NEW.conc_limit IS NULL)) AND ((NEW.conc_limit IS NULL) OR (NEW.conc_limit >= 1)))) IS FALSE -- steps_conc_check
    OR ((NEW.condition = ANY (ARRAY['pending'::text, 'true'::text, 'false'::text, 'error'::text]))) IS FALSE -- steps_condition_check
    OR ((NEW.deps_failed >= 0)) IS FALSE -- steps_deps_failed_check
    OR ((NEW.deps_skipped >= 0)) IS FALSE -- steps_deps_skipped_check
    OR ((NEW.key ~ '^[a-z0-9][a-z0-9_-]{0,62}(\[[0-9]{1,12}\])?$'::text)) IS FALSE -- steps_key_check
    OR ((((NEW.map_parent IS NULL) = (NEW.map_index IS NULL)) AND ((NEW.map_parent IS NULL) OR (NEW.key = (((NEW.map_parent || '['::text) || NEW.map_index) || ']'::text))))) IS FALSE -- steps_map_instance_check
    OR ((NEW.max_attempts >= 1)) IS FALSE -- steps_max_attempts_check
    OR ((NEW.on_exhausted = ANY (ARRAY['fail'::text, 'pause'::text]))) IS FALSE -- steps_on_exhausted_check
    OR ((NEW.on_timeout = ANY (ARRAY['fail'::text, 'continue'::text]))) IS FALSE -- steps_on_timeout_check
    OR ((NEW.phase = ANY (ARRAY['main'::text, 'compensate'::text, 'on_failure'::text]))) IS FALSE -- steps_phase_check
    OR (((NEW.priority >= 0) AND (NEW.priority <= 9))) IS FALSE -- steps_priority_check
    OR ((NEW.queue_timeout_s > (0)::double precision)) IS FALSE -- steps_queue_timeout_s_check
    OR ((((NEW.rate_name IS NULL) = (NEW.rate_key IS NULL)) AND ((NEW.rate_name IS NULL) = (NEW.rate_limit IS NULL)) AND ((NEW.rate_name IS NULL) = (NEW.rate_per_s IS NULL)) AND ((NEW.rate_limit IS NULL) OR (NEW.rate_limit >= 1)) AND ((NEW.rate_per_s IS NULL) OR (NEW.rate_per_s > (0)::double precision)))) IS FALSE -- steps_rate_check
    OR ((NEW.trigger_rule = ANY (ARRAY['all_succeeded'::text, 'all_done'::text, 'none_failed'::text, 'any_failed'::text]))) IS FALSE -- steps_trigger_rule_check
    OR ((NEW.wait_kind = ANY (ARRAY['sleep'::text, 'signal'::text, 'approval'::text, 'callback'::text, 'child_run'::text, 'map'::text]))) IS FALSE -- steps_wait_kind_check
)
EXECUTE FUNCTION cairn_steps_check_failed();

-- [from 00034_insert_checks.sql]
-- An insert into steps is checked once per statement over the rows inserted
-- (steps_checks_inserted, a transition table) instead of row by row by the WHEN of
-- steps_checks, which now fires on updates of the checks' columns only. A row
-- trigger's WHEN is read and compiled again at every statement, and create-run
-- inserts its run's steps in one; the statement trigger's query is planned once per
-- connection. The checks are 00030's, the same as steps_checks' WHEN (a change to
-- one is a change to both). Runs of 10 steps created through the catalog
-- (synchronous_commit off, blocks of 400 alternated), p50: 0.62–0.88 ms with the
-- row trigger, 0.56–0.74 ms with the statement trigger. (As one SQL function of a
-- steps row that both triggers call, the checks were slower than the row trigger:
-- each field is read from the whole row made for the call.)
CREATE OR REPLACE FUNCTION cairn_steps_check_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_bad jsonb;
BEGIN
    SELECT to_jsonb(n) INTO v_bad FROM inserted n
    WHERE ((n.approval_required >= 1)) IS FALSE -- steps_approval_required_check
       OR ((n.approvals >= 0)) IS FALSE -- steps_approvals_check
       OR ((n.callback_outcome = ANY (ARRAY['succeeded'::text, 'failed'::text]))) IS FALSE -- steps_callback_outcome_check
       OR ((n.compensate_attempts >= 1)) IS FALSE -- steps_compensate_attempts_check
       OR (((n.phase = 'compensate'::text) = (n.compensates IS NOT NULL))) IS FALSE -- steps_compensates_check
       OR ((((n.conc_name IS NULL) = (n.conc_key IS NULL)) AND ((n.conc_name IS NULL) = (n.conc_limit IS NULL)) AND ((n.conc_limit IS NULL) OR (n.conc_limit >= 1)))) IS FALSE -- steps_conc_check
       OR ((n.condition = ANY (ARRAY['pending'::text, 'true'::text, 'false'::text, 'error'::text]))) IS FALSE -- steps_condition_check
       OR ((n.deps_failed >= 0)) IS FALSE -- steps_deps_failed_check
       OR ((n.deps_skipped >= 0)) IS FALSE -- steps_deps_skipped_check
       OR ((n.key ~ '^[a-z0-9][a-z0-9_-]{0,62}(\[[0-9]{1,12}\])?$'::text)) IS FALSE -- steps_key_check
       OR ((((n.map_parent IS NULL) = (n.map_index IS NULL)) AND ((n.map_parent IS NULL) OR (n.key = (((n.map_parent || '['::text) || n.map_index) || ']'::text))))) IS FALSE -- steps_map_instance_check
       OR ((n.max_attempts >= 1)) IS FALSE -- steps_max_attempts_check
       OR ((n.on_exhausted = ANY (ARRAY['fail'::text, 'pause'::text]))) IS FALSE -- steps_on_exhausted_check
       OR ((n.on_timeout = ANY (ARRAY['fail'::text, 'continue'::text]))) IS FALSE -- steps_on_timeout_check
       OR ((n.phase = ANY (ARRAY['main'::text, 'compensate'::text, 'on_failure'::text]))) IS FALSE -- steps_phase_check
       OR (((n.priority >= 0) AND (n.priority <= 9))) IS FALSE -- steps_priority_check
       OR ((n.queue_timeout_s > (0)::double precision)) IS FALSE -- steps_queue_timeout_s_check
       OR ((((n.rate_name IS NULL) = (n.rate_key IS NULL)) AND ((n.rate_name IS NULL) = (n.rate_limit IS NULL)) AND ((n.rate_name IS NULL) = (n.rate_per_s IS NULL)) AND ((n.rate_limit IS NULL) OR (n.rate_limit >= 1)) AND ((n.rate_per_s IS NULL) OR (n.rate_per_s > (0)::double precision)))) IS FALSE -- steps_rate_check
       OR ((n.trigger_rule = ANY (ARRAY['all_succeeded'::text, 'all_done'::text, 'none_failed'::text, 'any_failed'::text]))) IS FALSE -- steps_trigger_rule_check
       OR ((n.wait_kind = ANY (ARRAY['sleep'::text, 'signal'::text, 'approval'::text, 'callback'::text, 'child_run'::text, 'map'::text]))) IS FALSE -- steps_wait_kind_check
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'new row for relation "steps" violates check trigger "steps_checks"'
            USING ERRCODE = 'check_violation', TABLE = 'steps', CONSTRAINT = 'steps_checks',
                  DETAIL = format('Failing row: %s.', v_bad),
                  HINT = 'The checks are those of the trigger steps_checks (migrations/00030_hot_checks.sql).';
    END IF;
    RETURN NULL;
END $$;

-- [from 00034_insert_checks.sql]
-- TODO comment
CREATE OR REPLACE TRIGGER steps_checks_inserted
AFTER INSERT ON steps REFERENCING NEW TABLE AS inserted
FOR EACH STATEMENT EXECUTE FUNCTION cairn_steps_check_inserted();

-- [from 00031_attempts_fk.sql]
-- TODO comment
CREATE OR REPLACE FUNCTION cairn_steps_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM attempts a USING gone g WHERE a.run_id = g.run_id AND a.step_key = g.key;
    RETURN NULL;
END $$;

-- [from 00031_attempts_fk.sql]
-- TODO comment
CREATE OR REPLACE TRIGGER steps_deleted AFTER DELETE ON steps
REFERENCING OLD TABLE AS gone
FOR EACH STATEMENT EXECUTE FUNCTION cairn_steps_deleted();

-- [from 00011_schedules.sql]
-- cairn_schedules_sync makes the schedules of NEW.workflow those of the version
-- NEW.version (the alias latest's new version): it is the one home of that sync, run
-- by a trigger on workflow_aliases whatever moved latest (deploy, promote,
-- rollback). A schedule whose cron and time zone did not change keeps its
-- next_fire_at; a new, changed or returning one gets NULL (computed by the fire
-- loop); those the version lacks become inactive. paused is never touched.
CREATE OR REPLACE FUNCTION cairn_schedules_sync()
RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO schedules AS s (workflow, name, version, cron, timezone, input, overlap, catchup, updated_by)
    SELECT NEW.workflow, d->>'name', NEW.version, d->>'cron', d->>'timezone',
           nullif(d->'input', 'null'::jsonb), d->>'overlap',
           make_interval(secs => coalesce((d->>'catchup_ms')::bigint, 0) / 1000.0), NEW.updated_by
    FROM workflow_versions v, jsonb_array_elements(coalesce(v.definition->'schedules', '[]'::jsonb)) AS d
    WHERE v.workflow = NEW.workflow AND v.version = NEW.version
    ON CONFLICT (workflow, name) DO UPDATE
    SET version = EXCLUDED.version, cron = EXCLUDED.cron, timezone = EXCLUDED.timezone,
        input = EXCLUDED.input, overlap = EXCLUDED.overlap, catchup = EXCLUDED.catchup,
        active = true,
        next_fire_at = CASE WHEN s.active AND s.cron = EXCLUDED.cron AND s.timezone = EXCLUDED.timezone
                            THEN s.next_fire_at END,
        buffered_fire_at = CASE WHEN EXCLUDED.overlap = 'buffer_one' THEN s.buffered_fire_at END,
        updated_at = now(), updated_by = NEW.updated_by;
    UPDATE schedules SET active = false, next_fire_at = NULL, buffered_fire_at = NULL,
        updated_at = now(), updated_by = NEW.updated_by
    WHERE workflow = NEW.workflow AND version <> NEW.version AND active;
    RETURN NULL;
END $$;

-- [from 00011_schedules.sql]
-- TODO comment
CREATE OR REPLACE TRIGGER workflow_aliases_schedules
AFTER INSERT OR UPDATE OF version ON workflow_aliases
FOR EACH ROW WHEN (NEW.alias = 'latest')
EXECUTE FUNCTION cairn_schedules_sync();

-- [from 00035_runs_version_fk.sql]
-- TODO comment
CREATE OR REPLACE FUNCTION cairn_workflow_versions_kept() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'workflow versions are never deleted or renumbered (runs name them)'
        USING ERRCODE = 'restrict_violation';
END $$;

-- [from 00035_runs_version_fk.sql]
-- TODO comment
CREATE OR REPLACE TRIGGER workflow_versions_kept BEFORE DELETE OR UPDATE OF workflow, version ON workflow_versions
FOR EACH ROW EXECUTE FUNCTION cairn_workflow_versions_kept();

-- [from 00035_runs_version_fk.sql]
-- TODO comment
CREATE OR REPLACE TRIGGER workflow_versions_kept_truncate BEFORE TRUNCATE ON workflow_versions
FOR EACH STATEMENT EXECUTE FUNCTION cairn_workflow_versions_kept();
