-- +goose Up
-- The hottest inserts stop checking their run's row: a step, a step edge or an
-- event referenced runs (id) with a foreign key, and each of their rows cost a
-- trigger that read and share-locked the run's row (a new run of 10 steps wrote
-- 20 such checks; each step of each run 2 more, for its events). The rule holds
-- without them:
--   - these rows are written only by statements that create their run in the same
--     statement (catalog.sqlRunCreate) or that
--     lock or update their run's row in the same transaction (the claim, the
--     finish functions, the waits, map expansion, retry and rerun), and a run
--     whose row is locked cannot be deleted meanwhile;
--   - runs are deleted only by the retention reaper (catalog.sqlRunsDelete), for
--     finished runs it holds locked, and it deletes their steps, edges and events
--     in the same statement (before, ON DELETE CASCADE did).
-- Attempts still reference steps, and signals, approvals and map rows their run
-- or step, with ON DELETE CASCADE: a deleted step still takes its attempts.
ALTER TABLE steps DROP CONSTRAINT steps_run_id_fkey;
ALTER TABLE step_edges DROP CONSTRAINT step_edges_run_id_fkey;
ALTER TABLE events DROP CONSTRAINT events_run_id_fkey;

-- +goose Down
ALTER TABLE events ADD CONSTRAINT events_run_id_fkey
    FOREIGN KEY (run_id) REFERENCES runs (id) ON DELETE CASCADE;
ALTER TABLE step_edges ADD CONSTRAINT step_edges_run_id_fkey
    FOREIGN KEY (run_id) REFERENCES runs (id) ON DELETE CASCADE;
ALTER TABLE steps ADD CONSTRAINT steps_run_id_fkey
    FOREIGN KEY (run_id) REFERENCES runs (id) ON DELETE CASCADE;
