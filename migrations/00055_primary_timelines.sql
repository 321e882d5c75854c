-- cairn-phase: expand
-- cairn-locks: none (a new table)
-- cairn-online: yes
-- primary_timelines records when each WAL timeline of the database was first seen
-- (cairn_primary_since, catalog/sql/steps.sql): a promotion starts a timeline, and
-- the sweep grace counts from it. The timeline the database is on now gets
-- -infinity: nothing happened to it that asks for a grace.
-- +goose Up
CREATE TABLE primary_timelines (
    timeline integer     PRIMARY KEY,
    seen_at  timestamptz NOT NULL
);
INSERT INTO primary_timelines (timeline, seen_at)
SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::integer, '-infinity'
WHERE NOT pg_is_in_recovery();

-- +goose Down
DROP TABLE primary_timelines;
