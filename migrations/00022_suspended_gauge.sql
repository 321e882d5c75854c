-- +goose Up
-- The suspended-steps gauge (catalog/gauge.go, read at every /metrics scrape)
-- counted steps with status = 'suspended' by reading the whole table: the partial
-- indexes on suspended steps leave some out (steps_wake_idx the held ones,
-- steps_signal_wait_idx all but signals). With a month of finished runs in the
-- catalog that was a sequential scan of every step ever run per scrape (450 ms with
-- 5,000,000 steps, the bench's growth scenario). This index holds the suspended
-- steps only, so the count follows the live waits, not the history.
CREATE INDEX steps_suspended_idx ON steps (run_id) WHERE status = 'suspended';

-- +goose Down
DROP INDEX steps_suspended_idx;
