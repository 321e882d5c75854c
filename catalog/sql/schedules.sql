-- Schedules: a workflow's cron schedules follow the version its alias latest names
-- (cairn_schedules_sync, run by the trigger workflow_aliases_schedules in
-- triggers.sql); the fire loop (runtime, catalog/schedule.go) is plain SQL. Go
-- caller: catalog/schedule.go.

-- cairn_schedule_pause pauses (p_paused true) or resumes (false) schedule p_id, with
-- p_actor; a resumed schedule's next fire is computed afresh (fires missed while it
-- was paused are not made up). Returns whether it changed (an event is written
-- then). Raises CA404 when there is no such schedule.
CREATE OR REPLACE FUNCTION cairn_schedule_pause(p_id bigint, p_paused boolean, p_actor text)
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
