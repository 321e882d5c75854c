-- Triggers: every trigger of the schema, with the function it runs. Each says what
-- fires it and what it changes, and whether it stays in SQL or should move into
-- the function that causes it, and why. The rule: a trigger stays when it is an
-- integrity rule of a table (checks, a foreign key's cascade or restriction), or
-- when the change it reacts to has many writers that it spares from knowing it (a
-- run's end, a suspended step's end); it should move when the transitions it
-- follows are made by a few functions that own them, so that a reader of those
-- functions sees all they do. catalog/state.go lists them for a reader of the Go
-- code.
--
-- The messages of the steps checks name migrations/00030_hot_checks.sql: a
-- function body's text changes only through a migration (go run ./migrations/gen).

-- cairn_run_relayout completes the steps that a retry (cairn_run_retry) made
-- runnable again, or that a rerun (cairn_run_rerun) created, with what they know
-- nothing of (both lay steps out through cairn_version_layout): the trigger rules,
-- conditions (to decide again) and compensations of the run's version, counters
-- cleared. A retried run's failure handlers are removed: should it fail again, it
-- compensates anew. It runs as a trigger on the event both write last
-- (run.retried, run.created with rerun_of), in their transaction (events_run_relayout,
-- below).
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

-- events_run_relayout: inserting a run.retried event, or a run.created event with
-- rerun_of, runs cairn_run_relayout on that run's steps (above).
-- Decision: should move into the functions that cause it. cairn_run_retry and
-- cairn_run_rerun write these events last, and this trigger exists only so that
-- neither body was copied into another migration to add a few columns; with
-- catalog/sql and the generator a change to them is an edit here, so the relayout
-- should become a plain function they call at their end (a reader of retry then
-- sees all of it). Not moved yet: it needs a migration of its own.
CREATE OR REPLACE TRIGGER events_run_relayout AFTER INSERT ON events FOR EACH ROW
    WHEN (NEW.type = 'run.retried' OR (NEW.type = 'run.created' AND NEW.data ? 'rerun_of'))
    EXECUTE FUNCTION cairn_run_relayout();

-- cairn_child_ended resolves the parent step waiting for a child run that has just
-- ended (cairn_child_resolve, maps_children.sql) in the child's transaction when the
-- parent's step and row can be had at once, and leaves it to the wake sweeper
-- otherwise (a row in child_run_ends; cairn_wake_next). The child's finisher holds
-- the child's steps and row, and run rows of other runs it finished in the same
-- batch: waiting there for the parent's row, it met a claim that held the parent's
-- row and waited for one of those in a circle. It waits at most 20 ms for any lock
-- of the parent's (far below deadlock_timeout, so no circle is ever found: the wait
-- gives up first), and the subtransaction gives back what it took of them.
CREATE OR REPLACE FUNCTION cairn_child_ended()
RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_timeout text := current_setting('lock_timeout');
BEGIN
    PERFORM set_config('lock_timeout', '20ms', true);
    BEGIN
        PERFORM cairn_child_resolve(NEW.id);
    EXCEPTION WHEN lock_not_available THEN
        PERFORM set_config('lock_timeout', v_timeout, true);
        INSERT INTO child_run_ends (child_id) VALUES (NEW.id) ON CONFLICT DO NOTHING;
    END;
    PERFORM set_config('lock_timeout', v_timeout, true);
    RETURN NULL;
END $$;

-- runs_child_ended: a child run (parent_step set) whose status becomes succeeded,
-- failed or canceled resolves its parent's step: succeeded with the child's output,
-- or failed (code child_failed or child_canceled); at once, or through the wake
-- sweeper when the parent is busy (cairn_child_ended).
-- Decision: stays in SQL. A run ends through many writers (cairn_run_settle,
-- cairn_steps_succeed, cairn_run_cancel, cairn_run_deadlines, a parent's cancel by
-- runs_children_follow); the status column is the one place every end passes, and
-- a writer added later cannot forget the parent.
CREATE OR REPLACE TRIGGER runs_child_ended AFTER UPDATE OF status ON runs
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
-- Each child is locked in the lock order (run_control.sql: its advisory lock,
-- exclusive, then its steps: cairn_run_control_lock) before its row, and looked at
-- again under those locks; a child that ended meanwhile is left as it is.
CREATE OR REPLACE FUNCTION cairn_children_follow()
RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    c       record;
    v_actor text := 'parent:' || NEW.id;
BEGIN
    IF NEW.status = 'canceled' THEN
        FOR c IN SELECT id FROM runs
                  WHERE parent_id = NEW.id AND parent_step IS NOT NULL AND status IN ('pending', 'running', 'paused')
                  ORDER BY id DESC
        LOOP
            PERFORM cairn_run_control_lock(c.id);
            CONTINUE WHEN NOT EXISTS (SELECT 1 FROM runs WHERE id = c.id AND status IN ('pending', 'running', 'paused'));
            PERFORM cairn_run_cancel(c.id, format('parent run %s canceled', NEW.id));
        END LOOP;
    ELSIF NEW.status = 'paused' AND NEW.pause_reason = 'run' THEN
        FOR c IN SELECT id FROM runs
                  WHERE parent_id = NEW.id AND parent_step IS NOT NULL AND status IN ('pending', 'running')
                  ORDER BY id DESC
        LOOP
            PERFORM cairn_run_control_lock(c.id);
            CONTINUE WHEN NOT EXISTS (SELECT 1 FROM runs WHERE id = c.id AND status IN ('pending', 'running'));
            PERFORM cairn_run_pause(c.id, v_actor, format('parent run %s paused', NEW.id));
        END LOOP;
    ELSIF OLD.status = 'paused' AND NEW.status IN ('pending', 'running') THEN
        FOR c IN SELECT r.id FROM runs r
                  WHERE r.parent_id = NEW.id AND r.parent_step IS NOT NULL AND r.status = 'paused'
                    AND r.pause_reason = 'run'
                  ORDER BY r.id DESC
        LOOP
            PERFORM cairn_run_control_lock(c.id);
            CONTINUE WHEN NOT EXISTS (
                SELECT 1 FROM runs r
                WHERE r.id = c.id AND r.status = 'paused' AND r.pause_reason = 'run'
                  AND (SELECT e.data ->> 'actor' FROM events e
                        WHERE e.run_id = r.id AND e.type = 'run.paused' ORDER BY e.seq DESC LIMIT 1) = v_actor);
            PERFORM cairn_run_resume(c.id, v_actor, format('parent run %s resumed', NEW.id));
        END LOOP;
    END IF;
    RETURN NULL;
END $$;

-- runs_children_follow: a run whose status or pause_reason changes makes its child
-- runs follow (cairn_children_follow): canceled, paused by an operator, resumed.
-- Decision: should move into the functions that cause it: cairn_run_cancel,
-- cairn_run_hold (kind run) and cairn_run_release make every transition it follows,
-- and a reader of cancel or pause should see that children go with the run. It
-- would keep its lock order (the parent's rows before its children's). Not moved
-- yet: it changes three functions and needs a migration of its own.
CREATE OR REPLACE TRIGGER runs_children_follow AFTER UPDATE OF status, pause_reason ON runs
    FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.pause_reason IS DISTINCT FROM NEW.pause_reason)
    EXECUTE FUNCTION cairn_children_follow();

-- cairn_span_outbox_run queues the span of a run that was canceled (span_outbox,
-- step_key NULL): no attempt records it. The dispatchers drain the queue (SKIP
-- LOCKED) and record the spans, or only drain it when they do not trace.
CREATE OR REPLACE FUNCTION cairn_span_outbox_run() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO span_outbox (run_id) VALUES (NEW.id);
    RETURN NULL;
END
$$;

-- runs_span_outbox: a run's status becoming canceled queues its span.
-- Decision: stays in SQL, with steps_span_outbox. The ends it reports are written by
-- several functions (cairn_run_cancel, and through runs_children_follow a parent's
-- cancel), none of which should know about tracing; the queue row is written in the
-- ending transaction, so no end is lost.
CREATE OR REPLACE TRIGGER runs_span_outbox AFTER UPDATE OF status ON runs FOR EACH ROW
    WHEN (NEW.status = 'canceled' AND OLD.status <> 'canceled')
    EXECUTE FUNCTION cairn_span_outbox_run();

-- cairn_span_outbox_step queues the span of a suspended step that ended (sleep,
-- signal, approval, callback, child run, map): the write that ends it (a wake, the
-- API, a child run's end) is made by no attempt of the step.
CREATE OR REPLACE FUNCTION cairn_span_outbox_step() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO span_outbox (run_id, step_key) VALUES (NEW.run_id, NEW.key);
    RETURN NULL;
END
$$;

-- steps_span_outbox: a step going from suspended to succeeded, failed, canceled or
-- skipped queues its span.
-- Decision: stays in SQL, for the reason given at runs_span_outbox (the writers are
-- cairn_step_resolve, cairn_step_wake, cairn_run_cancel, cairn_skip_dependents…).
CREATE OR REPLACE TRIGGER steps_span_outbox AFTER UPDATE OF status ON steps FOR EACH ROW
    WHEN (OLD.status = 'suspended' AND NEW.status IN ('succeeded', 'failed', 'canceled', 'skipped'))
    EXECUTE FUNCTION cairn_span_outbox_step();

-- cairn_step_flow_inherit fills in a new step's flow settings (limits and keys,
-- priority, runs_on, queue_timeout): a map instance takes its map step's; a
-- compensation or an on_failure step takes its own from runs.handler_flow (its
-- limit keys evaluated when the run was created, as every step's are), else keeps
-- the defaults it was inserted with.
CREATE OR REPLACE FUNCTION cairn_step_flow_inherit()
RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    f jsonb;
BEGIN
    IF NEW.map_parent IS NOT NULL THEN
        SELECT p.conc_name, p.conc_key, p.conc_limit, p.rate_name, p.rate_key, p.rate_limit, p.rate_per_s,
               p.priority, p.runs_on, p.queue_timeout_s, p.quota_ns
        INTO NEW.conc_name, NEW.conc_key, NEW.conc_limit, NEW.rate_name, NEW.rate_key, NEW.rate_limit,
             NEW.rate_per_s, NEW.priority, NEW.runs_on, NEW.queue_timeout_s, NEW.quota_ns
        FROM steps p WHERE p.run_id = NEW.run_id AND p.key = NEW.map_parent;
        RETURN NEW;
    END IF;
    SELECT r.handler_flow -> NEW.key, nullif(cairn_namespace(r.workflow), 'default') INTO f, NEW.quota_ns
    FROM runs r WHERE r.id = NEW.run_id;
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

-- steps_flow_inherit: before a map instance or a failure handler is inserted (its
-- flow settings, and the namespace whose quota bounds it: quota_ns, 00095).
-- Decision: stays in SQL. It is the one home of "a map instance or a handler has
-- these flow settings" whatever inserts the row (cairn_map_expand,
-- cairn_run_compensate, a retry's relayout); moving it would copy the rule into each.
CREATE OR REPLACE TRIGGER steps_flow_inherit BEFORE INSERT ON steps
    FOR EACH ROW WHEN (NEW.map_parent IS NOT NULL OR NEW.phase <> 'main')
    EXECUTE FUNCTION cairn_step_flow_inherit();

-- cairn_steps_check_failed raises the check_violation that one of steps' checks
-- would have raised (steps_checks).
CREATE OR REPLACE FUNCTION cairn_steps_check_failed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'new row for relation "steps" violates check trigger "steps_checks"'
        USING ERRCODE = 'check_violation', TABLE = 'steps', CONSTRAINT = 'steps_checks',
              DETAIL = format('Failing row: %s.', to_jsonb(NEW)),
              HINT = 'The checks are those of the trigger steps_checks (migrations/00030_hot_checks.sql).';
END $$;

-- steps_checks: the checks of steps that no update on the hot path touches are
-- tested by this trigger when one of their columns is updated, instead of at every
-- update: PostgreSQL tests every check of a table at every update of a row,
-- whatever the columns set (28 checks cost about 4 µs per row updated, and a step
-- is updated three times on its way). A check passes unless its expression is false
-- (NULL passes): the WHEN is true when one of them is false, each as the
-- constraint it replaces (named in a comment). It fires only for the columns it
-- lists (UPDATE OF), and after the row, so it takes no lock. Inserts are checked by
-- steps_checks_inserted; the two lists are the same (a change to one is a change to
-- both).
-- Decision: stays in SQL: it is a table's integrity rule, which must hold whatever
-- writes the row.
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
    OR ((NEW.wait_kind = ANY (ARRAY['sleep'::text, 'signal'::text, 'approval'::text, 'callback'::text, 'child_run'::text, 'map'::text, 'event'::text]))) IS FALSE -- steps_wait_kind_check
)
EXECUTE FUNCTION cairn_steps_check_failed();

-- An insert into steps is checked once per statement over the rows inserted
-- (steps_checks_inserted, a transition table) instead of row by row by the WHEN of
-- steps_checks, which fires on updates of the checks' columns only. A row
-- trigger's WHEN is read and compiled again at every statement, and create-run
-- inserts its run's steps in one; the statement trigger's query is planned once per
-- connection. The checks are the same as steps_checks' WHEN (a change to one is a
-- change to both). Runs of 10 steps created through the catalog
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
       OR ((n.wait_kind = ANY (ARRAY['sleep'::text, 'signal'::text, 'approval'::text, 'callback'::text, 'child_run'::text, 'map'::text, 'event'::text]))) IS FALSE -- steps_wait_kind_check
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'new row for relation "steps" violates check trigger "steps_checks"'
            USING ERRCODE = 'check_violation', TABLE = 'steps', CONSTRAINT = 'steps_checks',
                  DETAIL = format('Failing row: %s.', v_bad),
                  HINT = 'The checks are those of the trigger steps_checks (migrations/00030_hot_checks.sql).';
    END IF;
    RETURN NULL;
END $$;

-- steps_checks_inserted: after an insert into steps, once per statement.
-- Decision: stays in SQL, as steps_checks.
CREATE OR REPLACE TRIGGER steps_checks_inserted
AFTER INSERT ON steps REFERENCING NEW TABLE AS inserted
FOR EACH STATEMENT EXECUTE FUNCTION cairn_steps_check_inserted();

-- cairn_steps_deleted deletes the attempts of deleted steps (their live log chunks
-- go with them: attempt_log_chunks' key to attempts cascades). It stands for a
-- foreign key from attempts to steps, dropped because its check share-locked the
-- step row the claim had just updated (a WAL record and a query per attempt).
-- Attempts are inserted only by the claim, for the steps it updates.
CREATE OR REPLACE FUNCTION cairn_steps_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM attempts a USING gone g WHERE a.run_id = g.run_id AND a.step_key = g.key;
    RETURN NULL;
END $$;

-- steps_deleted: after a delete from steps (the reaper's deletes, a retry's or
-- rerun's new layout, failure handlers laid out anew), once per statement, with the
-- deleted rows as a transition table.
-- Decision: stays in SQL: it is a foreign key's cascade in another form.
CREATE OR REPLACE TRIGGER steps_deleted AFTER DELETE ON steps
REFERENCING OLD TABLE AS gone
FOR EACH STATEMENT EXECUTE FUNCTION cairn_steps_deleted();

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

-- workflow_aliases_schedules: the alias latest created or moved (deploy, promote,
-- rollback: cairn_alias_set, cairn_alias_rollback) syncs the workflow's schedules
-- with the version it names (cairn_schedules_sync, above).
-- Decision: stays in SQL. Both alias writers would have to call the sync, and a
-- third way to move latest would have to remember it; aliases move rarely, so the
-- trigger costs nothing on a hot path.
CREATE OR REPLACE TRIGGER workflow_aliases_schedules
AFTER INSERT OR UPDATE OF version ON workflow_aliases
FOR EACH ROW WHEN (NEW.alias = 'latest')
EXECUTE FUNCTION cairn_schedules_sync();

-- cairn_workflow_versions_kept refuses to delete, renumber or truncate workflow
-- versions (errcode restrict_violation): runs name their version without a foreign
-- key (its check share-locked the one row every run of a version shares), so a
-- version must always be there to read. No code deletes one.
CREATE OR REPLACE FUNCTION cairn_workflow_versions_kept() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'workflow versions are never deleted or renumbered (runs name them)'
        USING ERRCODE = 'restrict_violation';
END $$;

-- workflow_versions_kept: before a delete, or an update of workflow or version, of
-- a workflow_versions row.
-- Decision: stays in SQL: an integrity rule (a foreign key's restriction in another
-- form).
CREATE OR REPLACE TRIGGER workflow_versions_kept BEFORE DELETE OR UPDATE OF workflow, version ON workflow_versions
FOR EACH ROW EXECUTE FUNCTION cairn_workflow_versions_kept();

-- workflow_versions_kept_truncate: before a TRUNCATE of workflow_versions (row
-- triggers do not fire on it). Stays in SQL, as workflow_versions_kept.
CREATE OR REPLACE TRIGGER workflow_versions_kept_truncate BEFORE TRUNCATE ON workflow_versions
FOR EACH STATEMENT EXECUTE FUNCTION cairn_workflow_versions_kept();
