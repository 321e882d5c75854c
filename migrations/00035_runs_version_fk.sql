-- +goose Up
-- A run no longer checks its version with a foreign key. Each new run's key
-- check read the workflow_versions row and share-locked it (FOR KEY SHARE): a
-- lock written to the one row every run of a version shares (a WAL record, and a
-- MultiXact when creators of that version overlap), and a query of its own in
-- every create-run (≈ 50 µs of its 0.6 ms of SQL). The check ran again at the end
-- of each run, when the finish updated the run's row twice in one transaction.
-- The rule holds without it:
--   - runs are inserted only by catalog.sqlRunCreate, which reads the version
--     it names from workflow_versions in the same statement (no row, no run), and
--     by a rerun (cairn_run_rerun), which copies the version of an existing run;
--   - versions are never deleted nor renumbered: no code does, and
--     workflow_versions_kept below refuses it (errcode restrict_violation), so
--     that a run's version is always there to read.
-- Aliases and schedules keep their keys to workflow_versions (cold tables).
ALTER TABLE runs DROP CONSTRAINT runs_workflow_version_fkey;

-- +goose StatementBegin
CREATE FUNCTION cairn_workflow_versions_kept() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'workflow versions are never deleted or renumbered (runs name them)'
        USING ERRCODE = 'restrict_violation';
END $$;
-- +goose StatementEnd

CREATE TRIGGER workflow_versions_kept BEFORE DELETE OR UPDATE OF workflow, version ON workflow_versions
FOR EACH ROW EXECUTE FUNCTION cairn_workflow_versions_kept();
CREATE TRIGGER workflow_versions_kept_truncate BEFORE TRUNCATE ON workflow_versions
FOR EACH STATEMENT EXECUTE FUNCTION cairn_workflow_versions_kept();

-- +goose Down
DROP TRIGGER workflow_versions_kept_truncate ON workflow_versions;
DROP TRIGGER workflow_versions_kept ON workflow_versions;
DROP FUNCTION cairn_workflow_versions_kept();
ALTER TABLE runs ADD CONSTRAINT runs_workflow_version_fkey
    FOREIGN KEY (workflow, version) REFERENCES workflow_versions (workflow, version);
