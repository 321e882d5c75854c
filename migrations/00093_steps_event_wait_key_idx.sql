-- cairn-phase: expand
-- cairn-locks: SHARE UPDATE EXCLUSIVE on steps (CREATE INDEX CONCURRENTLY)
-- cairn-online: yes
-- The steps waiting for an event of a name, by their key (00092), and those
-- without one: an event reads the steps whose key it has from the first index
-- and every step without a key from the second (catalog/received_event.go),
-- each an index of its own so that neither lookup reads the other's steps. Built
-- concurrently: steps is large.
-- +goose NO TRANSACTION
-- +goose Up
CREATE INDEX CONCURRENTLY IF NOT EXISTS steps_event_wait_key_idx ON steps (wait_name, wait_key)
    WHERE status = 'suspended' AND wait_kind = 'event' AND wait_key IS NOT NULL;
CREATE INDEX CONCURRENTLY IF NOT EXISTS steps_event_wait_unkeyed_idx ON steps (wait_name)
    WHERE status = 'suspended' AND wait_kind = 'event' AND wait_key IS NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS steps_event_wait_unkeyed_idx;
DROP INDEX CONCURRENTLY IF EXISTS steps_event_wait_key_idx;
