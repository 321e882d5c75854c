-- +goose Up
-- cairn_run_control_lock takes the locks of run p_run in the order of migration
-- 00023 (its advisory lock, exclusive; then its steps that are not finished or
-- are held, in key order) for an operator's pause or resume, which call it before
-- cairn_run_pause or cairn_run_resume (they lock the steps, unordered, then the
-- run's row). Before, a pause or a resume of a run whose steps were finishing
-- could wait for a finisher in a circle (catalog TestPauseWhileStepsFinish: 1 to
-- 3 of 3 pauses and resumes of a wide run retried for a deadlock); now it waits
-- for the finishing batches in flight, and new ones wait for it. It returns true,
-- so that a statement can take the locks in its WHERE clause before it writes.
-- A run paused or resumed with its parent (runs_children_follow) is not: that
-- trigger holds the parent's row already.
-- +goose StatementBegin
CREATE FUNCTION cairn_run_control_lock(p_run uuid)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cairn_run_lock(p_run);
    PERFORM 1 FROM steps
    WHERE run_id = p_run AND (status IN ('waiting', 'ready', 'running', 'suspended') OR held)
    ORDER BY key FOR UPDATE;
    RETURN true;
END $$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION cairn_run_control_lock(uuid);
