-- +goose Up
-- The live tail of a running attempt's log (issue 17): the dispatcher publishes
-- what the handler wrote to its log, masked, about once a second (and at least
-- every 64 KiB), as chunks at their byte offset in the attempt's log; any API
-- server reads them while the attempt runs. A chunk's bytes are the bytes of the
-- log stored at the attempt's end, at the same offsets, so a reader moves from
-- the chunks to the stored log without a gap. The dispatcher keeps only the tail
-- (the oldest chunks go past a cap per attempt) and deletes the chunks once the
-- final log is stored; those of an attempt whose dispatcher died stay (they are
-- its only log) until its run is deleted.
CREATE TABLE attempt_log_chunks (
    run_id     uuid    NOT NULL,
    step_key   text    NOT NULL,
    number     integer NOT NULL,
    byte_start bigint  NOT NULL CHECK (byte_start >= 0),
    data       bytea   NOT NULL,
    PRIMARY KEY (run_id, step_key, number, byte_start),
    FOREIGN KEY (run_id, step_key, number) REFERENCES attempts (run_id, step_key, number) ON DELETE CASCADE
);

-- Spans the attempts do not record (issue 17): a suspended step (sleep, signal,
-- approval, callback, child run, map) ends by a write no attempt of it makes (a
-- wake, the API, a child run's end), and a canceled run ends by the cancel. Those
-- ends are queued here by triggers, in the ending write's transaction; the
-- dispatchers drain the queue (SKIP LOCKED) and record the spans (a step's, and its
-- run's when the step's end ended it; a canceled run's with the cancel status), or
-- only drain it when they do not trace.
CREATE TABLE span_outbox (
    id       bigserial PRIMARY KEY,
    run_id   uuid NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    step_key text -- NULL: the run's span (a canceled run)
);
CREATE INDEX span_outbox_run_id_idx ON span_outbox (run_id);

-- +goose StatementBegin
CREATE FUNCTION cairn_span_outbox_step() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO span_outbox (run_id, step_key) VALUES (NEW.run_id, NEW.key);
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION cairn_span_outbox_run() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO span_outbox (run_id) VALUES (NEW.id);
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER steps_span_outbox AFTER UPDATE OF status ON steps FOR EACH ROW
    WHEN (OLD.status = 'suspended' AND NEW.status IN ('succeeded', 'failed', 'canceled', 'skipped'))
    EXECUTE FUNCTION cairn_span_outbox_step();

CREATE TRIGGER runs_span_outbox AFTER UPDATE OF status ON runs FOR EACH ROW
    WHEN (NEW.status = 'canceled' AND OLD.status <> 'canceled')
    EXECUTE FUNCTION cairn_span_outbox_run();

-- +goose Down
DROP TRIGGER runs_span_outbox ON runs;
DROP TRIGGER steps_span_outbox ON steps;
DROP FUNCTION cairn_span_outbox_run();
DROP FUNCTION cairn_span_outbox_step();
DROP TABLE span_outbox;
DROP TABLE attempt_log_chunks;
