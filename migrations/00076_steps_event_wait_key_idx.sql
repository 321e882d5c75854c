-- cairn-phase: expand
-- cairn-locks: SHARE UPDATE EXCLUSIVE on steps (CREATE INDEX CONCURRENTLY)
-- cairn-online: yes
-- The steps waiting for an event of a name, by their key (00075): an event looks
-- up the steps whose key it has, and those without one (wait_key IS NULL), in
-- this index (catalog/received_event.go). Built concurrently: steps is large.
-- +goose NO TRANSACTION
-- +goose Up
CREATE INDEX CONCURRENTLY IF NOT EXISTS steps_event_wait_key_idx ON steps (wait_name, wait_key)
    WHERE status = 'suspended' AND wait_kind = 'event';

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS steps_event_wait_key_idx;
