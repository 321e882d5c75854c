-- +goose Up
-- Schedules (issue 14): the `schedules:` of a workflow's manifest, one row per
-- (workflow, schedule name), following the version the workflow's alias `latest`
-- names. The fire loop of every dispatcher (catalog's ScheduleFire) takes the due
-- rows FOR UPDATE SKIP LOCKED and, in one transaction per batch, creates each fire's
-- run (idempotency key schedule:<id>:<fire time>) and advances next_fire_at: each
-- fire is created once, with any number of servers and no leader.
CREATE TABLE schedules (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workflow        text        NOT NULL REFERENCES workflows (name),
    name            text        NOT NULL CHECK (name ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    -- The version whose definition the row was last synced from (latest's, while
    -- active).
    version         integer     NOT NULL,
    cron            text        NOT NULL,
    timezone        text        NOT NULL,
    input           jsonb,
    overlap         text        NOT NULL CHECK (overlap IN ('skip', 'allow', 'buffer_one', 'cancel_other')),
    catchup         interval    NOT NULL DEFAULT '0' CHECK (catchup >= '0'),
    -- false when the version latest names has no schedule of this name: the row
    -- keeps its pause state (and its history) should a later version bring it back.
    active          boolean     NOT NULL DEFAULT true,
    paused          boolean     NOT NULL DEFAULT false,
    -- The next fire time; NULL when it is still to be computed (a new, changed,
    -- reactivated or resumed schedule): the fire loop computes it in Go from cron
    -- and timezone, from the time it sees the row, and fires nothing for it then.
    next_fire_at    timestamptz,
    last_fire_at    timestamptz,
    -- The run of the schedule's latest fire (overlap looks at it).
    last_run_id     uuid,
    -- buffer_one: the fire that waits for last_run_id to end.
    buffered_fire_at timestamptz,
    fires           bigint      NOT NULL DEFAULT 0 CHECK (fires >= 0),
    skipped         bigint      NOT NULL DEFAULT 0 CHECK (skipped >= 0),
    last_skipped_at timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    updated_by      text        NOT NULL DEFAULT 'deploy',
    UNIQUE (workflow, name),
    FOREIGN KEY (workflow, version) REFERENCES workflow_versions (workflow, version),
    CHECK (active OR next_fire_at IS NULL)
);
-- What the fire loop looks for: due (or not yet computed) active schedules, and
-- buffered fires.
CREATE INDEX schedules_due_idx ON schedules (next_fire_at NULLS FIRST) WHERE active AND NOT paused;
CREATE INDEX schedules_buffered_idx ON schedules (id) WHERE buffered_fire_at IS NOT NULL;

-- Operator actions on schedules (pause, resume, trigger, backfill), with their actor.
CREATE TABLE schedule_events (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    schedule_id bigint      NOT NULL REFERENCES schedules (id) ON DELETE CASCADE,
    type        text        NOT NULL CHECK (type ~ '^[a-z][a-z_.]{0,62}$'),
    actor       text        NOT NULL,
    data        jsonb       NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX schedule_events_schedule_idx ON schedule_events (schedule_id, id DESC);

-- cairn_schedules_sync makes the schedules of NEW.workflow those of the version
-- NEW.version (the alias latest's new version): it is the one home of that sync, run
-- by a trigger on workflow_aliases whatever moved latest (deploy, promote,
-- rollback). A schedule whose cron and time zone did not change keeps its
-- next_fire_at; a new, changed or returning one gets NULL (computed by the fire
-- loop); those the version lacks become inactive. paused is never touched.
-- +goose StatementBegin
CREATE FUNCTION cairn_schedules_sync()
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
-- +goose StatementEnd

CREATE TRIGGER workflow_aliases_schedules
AFTER INSERT OR UPDATE OF version ON workflow_aliases
FOR EACH ROW WHEN (NEW.alias = 'latest')
EXECUTE FUNCTION cairn_schedules_sync();

-- Workflows deployed before this migration: their latest's schedules (none can
-- exist yet, as no earlier definition has any; kept for completeness).
INSERT INTO schedules (workflow, name, version, cron, timezone, input, overlap, catchup)
SELECT a.workflow, d->>'name', a.version, d->>'cron', d->>'timezone',
       nullif(d->'input', 'null'::jsonb), d->>'overlap',
       make_interval(secs => coalesce((d->>'catchup_ms')::bigint, 0) / 1000.0)
FROM workflow_aliases a
JOIN workflow_versions v ON v.workflow = a.workflow AND v.version = a.version
CROSS JOIN LATERAL jsonb_array_elements(coalesce(v.definition->'schedules', '[]'::jsonb)) AS d
WHERE a.alias = 'latest';

-- cairn_schedule_pause pauses (p_paused true) or resumes (false) schedule p_id, with
-- p_actor; a resumed schedule's next fire is computed afresh (fires missed while it
-- was paused are not made up). Returns whether it changed (an event is written
-- then). Raises CA404 when there is no such schedule.
-- +goose StatementBegin
CREATE FUNCTION cairn_schedule_pause(p_id bigint, p_paused boolean, p_actor text)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_paused boolean;
BEGIN
    SELECT paused INTO v_paused FROM schedules WHERE id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'schedule % not found', p_id USING ERRCODE = 'CA404';
    END IF;
    IF v_paused = p_paused THEN
        RETURN false;
    END IF;
    UPDATE schedules SET paused = p_paused, updated_at = now(), updated_by = p_actor,
        next_fire_at = CASE WHEN p_paused THEN next_fire_at END
    WHERE id = p_id;
    INSERT INTO schedule_events (schedule_id, type, actor)
    VALUES (p_id, CASE WHEN p_paused THEN 'schedule.paused' ELSE 'schedule.resumed' END, p_actor);
    RETURN true;
END $$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION cairn_schedule_pause(bigint, boolean, text);
DROP TRIGGER workflow_aliases_schedules ON workflow_aliases;
DROP FUNCTION cairn_schedules_sync();
DROP TABLE schedule_events;
DROP TABLE schedules;
