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
-- Nothing: the index is 00052's (CREATE INDEX, in its transaction), and its Down
-- drops it. A catalog whose 00052 did not build it got it here, and keeps it until
-- 00052's Down.
SELECT 1;
