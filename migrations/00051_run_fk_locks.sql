-- cairn-phase: expand
-- cairn-locks: ACCESS EXCLUSIVE on signals, span_outbox, run_trees and runs (brief: constraints dropped, no rewrite)
-- cairn-online: yes
-- +goose Up
-- Rows that name a busy run no longer lock it. A foreign key's check takes a
-- KEY SHARE lock on the row it references, and five tables referenced runs (id)
-- from statements that write while the run is busy: a signal (cairn_signal_send
-- inserts it before it writes the run's row), a child run and its tree's count
-- (parent_id, run_trees.root_id: the parent or root is running), a rerun
-- (rerun_of), a span queued when a suspended step ends (span_outbox, by the
-- trigger steps_span_outbox). Such a lock, held by a transaction that has not
-- written the row yet, shares a MultiXact with the claim or finisher that updates
-- the row meanwhile. While that MultiXact has a running member, PostgreSQL sees
-- the row's previous version as "being modified" rather than "updated": a
-- writer that reaches the previous version from its snapshot queues for its tuple
-- lock, and one that holds that tuple lock waits, through the update chain, for
-- the transaction that holds the current version. Two claims, or a claim and a
-- finishing batch, met there in a circle that no lock order prevents
-- (catalog TestLockOrderStress: about one deadlock in five runs).
--
-- Without these keys the rule of migration 00025 holds them instead: the rows
-- are written by statements that find their run (or parent, or root) unfinished
-- and busy, and runs are deleted only by the retention reaper
-- (catalog.sqlRunsDelete), for finished runs whose parents and children are
-- finished; it deletes their signals, queued spans and tree counts, and clears
-- rerun_of and parent_id in the runs that name them, in the same statement.
-- child_run_ends and step_history keep their keys: the transaction that writes
-- them has written the run's row first. An expand migration: a binary of an
-- earlier release works without these keys (its reaper relied on them only to
-- delete a deleted run's signals, spans and tree count, which then stay behind).
ALTER TABLE signals DROP CONSTRAINT signals_run_id_fkey;
ALTER TABLE span_outbox DROP CONSTRAINT span_outbox_run_id_fkey;
ALTER TABLE run_trees DROP CONSTRAINT run_trees_root_id_fkey;
ALTER TABLE runs DROP CONSTRAINT runs_parent_id_fkey;
ALTER TABLE runs DROP CONSTRAINT runs_rerun_of_fkey;

-- +goose Down
DELETE FROM signals s WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = s.run_id);
DELETE FROM span_outbox o WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = o.run_id);
DELETE FROM run_trees t WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = t.root_id);
UPDATE runs c SET parent_id = NULL
WHERE c.parent_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = c.parent_id);
UPDATE runs c SET rerun_of = NULL
WHERE c.rerun_of IS NOT NULL AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = c.rerun_of);
ALTER TABLE runs ADD CONSTRAINT runs_rerun_of_fkey
    FOREIGN KEY (rerun_of) REFERENCES runs (id) ON DELETE SET NULL;
ALTER TABLE runs ADD CONSTRAINT runs_parent_id_fkey
    FOREIGN KEY (parent_id) REFERENCES runs (id) ON DELETE SET NULL;
ALTER TABLE run_trees ADD CONSTRAINT run_trees_root_id_fkey
    FOREIGN KEY (root_id) REFERENCES runs (id) ON DELETE CASCADE;
ALTER TABLE span_outbox ADD CONSTRAINT span_outbox_run_id_fkey
    FOREIGN KEY (run_id) REFERENCES runs (id) ON DELETE CASCADE;
ALTER TABLE signals ADD CONSTRAINT signals_run_id_fkey
    FOREIGN KEY (run_id) REFERENCES runs (id) ON DELETE CASCADE;
