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

-- +goose Down
DROP TABLE attempt_log_chunks;
