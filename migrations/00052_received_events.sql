-- cairn-phase: expand
-- cairn-locks: SHARE on received_events (the indexes of a new, empty table)
-- cairn-online: yes
-- +goose Up
-- Received events (POST /v1/events; catalog/event.go, docs/events.md). An event is
-- stored once per id: the same id again answers the first outcome (outcome, written
-- in the transaction that stored it) and changes nothing; request_hash tells a
-- repeat from a different body under the same id. data is the JSON body or a
-- {"$blob": …} reference. received_at orders what a waiting step may take: events
-- received after its run was created.
CREATE TABLE received_events (
    seq          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id           text        NOT NULL UNIQUE CHECK (length(id) BETWEEN 1 AND 200),
    name         text        NOT NULL CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'),
    data         jsonb       NOT NULL,
    request_hash text        NOT NULL,
    actor        text        NOT NULL,
    received_at  timestamptz NOT NULL DEFAULT now(),
    outcome      jsonb       NOT NULL DEFAULT '{}'
);
CREATE INDEX received_events_name_idx ON received_events (name, seq);
CREATE INDEX received_events_received_at_idx ON received_events (received_at);

-- The events a wait_for_event step took, one per step and try of its run: an event
-- completes a wait once, and a step that waits again (its run retried) does not
-- take the same event twice. Rows go with their run (the retention reaper).
CREATE TABLE event_takes (
    run_id    uuid   NOT NULL,
    step_key  text   NOT NULL,
    event_seq bigint NOT NULL REFERENCES received_events (seq) ON DELETE CASCADE,
    taken_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, step_key, event_seq)
);

-- +goose Down
DROP TABLE event_takes;
DROP TABLE received_events;
