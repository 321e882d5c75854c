-- cairn-phase: expand
-- cairn-locks: SHARE UPDATE EXCLUSIVE on steps (CREATE INDEX CONCURRENTLY)
-- cairn-online: yes
-- The steps waiting for an event of a name, across runs: what an event looks at
-- (catalog/received_event.go). Built concurrently: steps is large.
-- +goose NO TRANSACTION
-- +goose Up
CREATE INDEX CONCURRENTLY IF NOT EXISTS steps_event_wait_idx ON steps (wait_name)
    WHERE status = 'suspended' AND wait_kind = 'event';

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS steps_event_wait_idx;
