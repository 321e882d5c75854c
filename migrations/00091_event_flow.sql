-- cairn-phase: expand
-- cairn-locks: SHARE on event_singletons and event_flow_pending (the indexes of new, empty tables)
-- cairn-online: yes
-- +goose Up
-- Start-time flow control of event triggers (singleton, debounce, batch;
-- catalog/event_flow.go, docs/events.md). Every row is written under the
-- transaction-scoped advisory lock of its key, never held in memory: a server that
-- dies mid-window leaves the window here, and any server fires it when due.

-- The run each singleton key of a workflow started last: the key is busy while
-- that run is unfinished. Rows of ended runs are deleted by the flow firer.
CREATE TABLE event_singletons (
    workflow   text        NOT NULL,
    flow_key   text        NOT NULL,
    run_id     uuid        NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workflow, flow_key)
);
CREATE INDEX event_singletons_started_idx ON event_singletons (started_at);

-- Starts held back: an open debounce or batch window of a trigger's key (one at a
-- time per key, due at due_at), or a singleton queue's start waiting for its key's
-- run to end (in id order). input is a debounce's (its last event's) or a queued
-- start's; a batch's events are its event_flow_items (bytes: their size as JSON
-- text). version, labels and priority are those of the trigger that took the
-- (last) event.
CREATE TABLE event_flow_pending (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind        text        NOT NULL CHECK (kind IN ('debounce', 'batch', 'queue')),
    workflow    text        NOT NULL,
    trigger_idx integer     NOT NULL,
    flow_key    text        NOT NULL,
    version     integer     NOT NULL,
    labels      jsonb,
    priority    integer,
    input       jsonb,
    events      integer     NOT NULL DEFAULT 0,
    bytes       bigint      NOT NULL DEFAULT 0,
    last_event  text        NOT NULL,
    opened_at   timestamptz NOT NULL DEFAULT now(),
    due_at      timestamptz,
    tries       integer     NOT NULL DEFAULT 0,
    last_error  text,
    CHECK ((kind = 'queue') = (due_at IS NULL))
);
CREATE UNIQUE INDEX event_flow_pending_window_idx ON event_flow_pending (workflow, trigger_idx, kind, flow_key)
    WHERE kind <> 'queue';
CREATE INDEX event_flow_pending_due_idx ON event_flow_pending (due_at) WHERE due_at IS NOT NULL;
CREATE INDEX event_flow_pending_queue_idx ON event_flow_pending (workflow, flow_key, id) WHERE kind = 'queue';

-- The events of a batch window, in arrival order (n from 1), each as expressions
-- see it: {id, name, data, received_at}.
CREATE TABLE event_flow_items (
    pending_id bigint  NOT NULL REFERENCES event_flow_pending (id) ON DELETE CASCADE,
    n          integer NOT NULL,
    item       jsonb   NOT NULL,
    PRIMARY KEY (pending_id, n)
);

-- +goose Down
DROP TABLE event_flow_items;
DROP TABLE event_flow_pending;
DROP TABLE event_singletons;
