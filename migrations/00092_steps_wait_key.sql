-- cairn-phase: expand
-- cairn-locks: ACCESS EXCLUSIVE on steps (brief: a column without a default, no rewrite)
-- cairn-online: yes
-- The key of a suspended wait_for_event step whose match is an equality of one
-- event field with a value of the run (event.data.order_id == input.order_id):
-- that field's name and the run's value (expr.Equality, catalog/received_event.go).
-- An event finds such a step by its key (00093's index) instead of evaluating the
-- match of every step waiting for its name. NULL: the step's match has no such
-- equality, and is evaluated against every event of its name. A server of the
-- previous release leaves it NULL, and evaluates every match as before.
-- +goose Up
ALTER TABLE steps ADD COLUMN wait_key text;

-- +goose Down
ALTER TABLE steps DROP COLUMN wait_key;
