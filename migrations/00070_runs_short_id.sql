-- +goose Up
-- A run's short ID is the last 12 hex digits of its ID (the UI shows it; the
-- random end of a UUIDv7, so two runs rarely share it). The UI's search and
-- cairn run get find a run by it (catalog.RunLookup): this index keeps that one
-- probe of the index, not a read of every run.
CREATE INDEX runs_short_id_idx ON runs ((right(id::text, 12)));

-- +goose Down
DROP INDEX runs_short_id_idx;
