-- cairn-phase: expand
-- cairn-locks: SHARE UPDATE EXCLUSIVE on runs (CREATE INDEX CONCURRENTLY)
-- cairn-online: yes
-- A run's short ID is the last 12 hex digits of its ID (the UI shows it; the
-- random end of a UUIDv7, so two runs rarely share it). The UI's search and
-- cairn run get find a run by it (catalog.RunLookup): this index keeps that one
-- probe of the index, not a read of every run. Built concurrently: runs is large.
-- +goose NO TRANSACTION
-- +goose Up
CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_short_id_idx ON runs ((right(id::text, 12)));

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS runs_short_id_idx;
