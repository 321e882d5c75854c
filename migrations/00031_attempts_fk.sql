-- +goose Up
-- An attempt no longer checks its step's row with a foreign key. Each claim
-- inserted one attempt row per step claimed, and the key's check read the step
-- by primary key and share-locked it: a lock written to the row the claim had
-- just updated, a WAL record, and a query of its own (3.6 % of PostgreSQL's
-- samples in `perf`, throughput scenario). The rule holds without it:
--   - attempts are inserted only by the claim (catalog.sqlClaimWrites), for
--     the steps it updates in the same statement;
--   - the attempts of deleted steps are deleted by steps_deleted below, a
--     statement's trigger that takes the deleted steps as a transition table:
--     the reaper's deletes (catalog.sqlRunsDelete), a retry's or rerun's new
--     layout and a map's new instances (before, ON DELETE CASCADE did). Their
--     live logs go with them (attempt_log_chunks' key to attempts cascades).
ALTER TABLE attempts DROP CONSTRAINT attempts_run_id_step_key_fkey;

-- +goose StatementBegin
CREATE FUNCTION cairn_steps_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM attempts a USING gone g WHERE a.run_id = g.run_id AND a.step_key = g.key;
    RETURN NULL;
END $$;
-- +goose StatementEnd

CREATE TRIGGER steps_deleted AFTER DELETE ON steps
REFERENCING OLD TABLE AS gone
FOR EACH STATEMENT EXECUTE FUNCTION cairn_steps_deleted();

-- +goose Down
DROP TRIGGER steps_deleted ON steps;
DROP FUNCTION cairn_steps_deleted();
ALTER TABLE attempts ADD CONSTRAINT attempts_run_id_step_key_fkey
    FOREIGN KEY (run_id, step_key) REFERENCES steps (run_id, key) ON DELETE CASCADE;
