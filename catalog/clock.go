package catalog

import (
	"context"
	"fmt"
	"time"
)

// The virtual clock of `cairn test` (docs/testing.md). The catalog's SQL reads
// the time with unqualified now() and clock_timestamp() (catalog/sql, and the
// statements of this package). PostgreSQL resolves an unqualified function
// name through search_path, and it searches pg_catalog first only when
// search_path does not list it: a database whose search_path is ClockSearchPath
// resolves them to the functions of the schema cairn_clock instead, which read
// a row that a test sets. Production databases never have that schema or that
// search_path, so they read the real clock at no cost: not one line of the
// production SQL differs. What the search_path cannot reach is fixed in the
// test database only (InstallVirtualClock): column DEFAULTs bound to
// pg_catalog.now() when their table was created.

// ClockSearchPath is the search_path of a database with a virtual clock.
const ClockSearchPath = "cairn_clock, pg_catalog, public"

const (
	// sqlClockInstall makes the schema cairn_clock, its clock row (at the real
	// time) and the functions that shadow pg_catalog's, and points the DEFAULTs
	// of every column of the public schema that reads now() or clock_timestamp()
	// at cairn_clock.now() (pg_get_expr qualifies pg_catalog's now() when the
	// search_path already shadows it). statement_timestamp() and transaction_timestamp() are
	// shadowed too, though the catalog does not call them. CURRENT_TIMESTAMP,
	// a keyword rather than a function, cannot be shadowed: the catalog does not
	// use it (TestVirtualClockCoversTheCatalog checks).
	sqlClockInstall = `
CREATE SCHEMA IF NOT EXISTS cairn_clock;
CREATE TABLE IF NOT EXISTS cairn_clock.clock (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    at  timestamptz NOT NULL
);
INSERT INTO cairn_clock.clock (at) VALUES (pg_catalog.now()) ON CONFLICT DO NOTHING;
CREATE OR REPLACE FUNCTION cairn_clock.now() RETURNS timestamptz
    LANGUAGE sql STABLE AS 'SELECT at FROM cairn_clock.clock';
CREATE OR REPLACE FUNCTION cairn_clock.clock_timestamp() RETURNS timestamptz
    LANGUAGE sql STABLE AS 'SELECT at FROM cairn_clock.clock';
CREATE OR REPLACE FUNCTION cairn_clock.statement_timestamp() RETURNS timestamptz
    LANGUAGE sql STABLE AS 'SELECT at FROM cairn_clock.clock';
CREATE OR REPLACE FUNCTION cairn_clock.transaction_timestamp() RETURNS timestamptz
    LANGUAGE sql STABLE AS 'SELECT at FROM cairn_clock.clock';
DO $$
DECLARE r record;
BEGIN
    FOR r IN SELECT d.adrelid::regclass AS tbl, a.attname AS col
             FROM pg_attrdef d
             JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
             JOIN pg_class c ON c.oid = d.adrelid
             WHERE c.relnamespace = 'public'::regnamespace
               AND regexp_replace(pg_get_expr(d.adbin, d.adrelid), '^pg_catalog[.]', '')
                   IN ('now()', 'clock_timestamp()', 'CURRENT_TIMESTAMP')
    LOOP
        EXECUTE format('ALTER TABLE %s ALTER COLUMN %I SET DEFAULT cairn_clock.now()', r.tbl, r.col);
    END LOOP;
END $$`

	sqlClockSet = `UPDATE cairn_clock.clock SET at = $1`
	sqlClockGet = `SELECT at FROM cairn_clock.clock`

	// sqlClockBusy is whether the catalog has work to do at the clock's time:
	// an attempt running (running); a step a claim would take now (ready, its
	// concurrency key not full, its rate bucket not empty: sqlClaimableLimits),
	// a wait, a deadline or a queue timeout due, a child run's end not yet
	// passed to its parent, a map with instances to create or to resolve (due).
	sqlClockBusy = `
SELECT EXISTS (SELECT 1 FROM steps WHERE status = 'running') AS running,
       EXISTS (SELECT 1 FROM steps s WHERE s.status = 'ready' AND NOT s.held AND s.ready_at <= now()` + sqlClaimableLimits + `)
    OR EXISTS (SELECT 1 FROM steps WHERE status = 'suspended' AND NOT held AND least(wait_until, timeout_at) <= now())
    OR EXISTS (SELECT 1 FROM child_run_ends)
    OR EXISTS (SELECT 1 FROM runs WHERE deadline_at <= now() AND status IN ('pending', 'running', 'paused'))
    OR EXISTS (SELECT 1 FROM step_maps m JOIN steps s ON s.run_id = m.run_id AND s.key = m.step_key
               WHERE NOT m.finished AND s.status = 'suspended' AND s.wait_kind = 'map' AND NOT s.held
                 AND (SELECT count(*) FROM steps i WHERE i.run_id = m.run_id AND i.map_parent = m.step_key
                        AND i.status NOT IN ('succeeded', 'failed', 'skipped', 'canceled'))
                     < CASE WHEN m.expanded THEN 1 ELSE m.max_parallel END) AS due`

	// sqlClockNextDue is the earliest time after the clock's at which something
	// becomes due: a retry's backoff ends, a wait ends or times out, a queue
	// timeout or a run's deadline passes, a rate bucket that ready steps wait
	// for has a token again (a millisecond after the exact time, which floating
	// point may miss).
	sqlClockNextDue = `
SELECT least(
    (SELECT min(ready_at) FROM steps WHERE status = 'ready' AND NOT held AND ready_at > now()),
    (SELECT min(least(wait_until, timeout_at)) FROM steps WHERE status = 'suspended' AND NOT held),
    (SELECT min(ready_at + make_interval(secs => queue_timeout_s)) FROM steps
      WHERE status = 'ready' AND queue_timeout_s IS NOT NULL),
    (SELECT min(deadline_at) FROM runs WHERE status IN ('pending', 'running', 'paused', 'compensating')),
    (SELECT min(b.at + make_interval(secs => (1 - b.tokens) * coalesce(l.rate_per_s, b.per_s)
                                              / coalesce(l.rate_limit, b.lim) + 0.001))
       FROM rate_buckets b LEFT JOIN limits l ON l.name = b.name
      WHERE b.tokens < 1 AND EXISTS (SELECT 1 FROM steps s WHERE s.status = 'ready' AND NOT s.held
                                       AND s.rate_name = b.name AND s.rate_key = b.key)))`
)

// InstallVirtualClock gives the database s works on a virtual clock that
// starts at the real time: a test database only (it changes column DEFAULTs).
// Connections see it once their search_path is ClockSearchPath (set it with
// ALTER DATABASE … SET search_path, or in the connection URL).
func (s *Store) InstallVirtualClock(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, sqlClockInstall); err != nil {
		return fmt.Errorf("install the virtual clock: %w", translateError(err))
	}
	return nil
}

// ClockSet sets the virtual clock (InstallVirtualClock) to t.
func (s *Store) ClockSet(ctx context.Context, t time.Time) error {
	if _, err := s.db.ExecContext(ctx, sqlClockSet, t); err != nil {
		return fmt.Errorf("set the virtual clock: %w", translateError(err))
	}
	return nil
}

// ClockGet returns the virtual clock's time (InstallVirtualClock).
func (s *Store) ClockGet(ctx context.Context) (time.Time, error) {
	var t time.Time
	if err := s.db.GetContext(ctx, &t, sqlClockGet); err != nil {
		return time.Time{}, fmt.Errorf("read the virtual clock: %w", translateError(err))
	}
	return t, nil
}

// ClockBusy reports whether an attempt is running (Busy.Running), and whether
// anything is due at the database's time (with the virtual clock, at its time:
// Busy.Due).
func (s *Store) ClockBusy(ctx context.Context) (Busy, error) {
	var b Busy
	if err := s.db.GetContext(ctx, &b, sqlClockBusy); err != nil {
		return Busy{}, fmt.Errorf("clock busy: %w", translateError(err))
	}
	return b, nil
}

// Busy is what ClockBusy found.
type Busy struct {
	// Running: an attempt runs.
	Running bool `db:"running"`
	// Due: a step a claim would take, a wait, deadline, queue timeout or child
	// run's end to apply, a map's instances to create or its end to record.
	Due bool `db:"due"`
}

// ClockNextDue returns the earliest time at which a retry, a wait, a queue
// timeout, a run's deadline or a rate limit's token comes due; the zero time
// when none will.
func (s *Store) ClockNextDue(ctx context.Context) (time.Time, error) {
	var t *time.Time
	if err := s.db.GetContext(ctx, &t, sqlClockNextDue); err != nil {
		return time.Time{}, fmt.Errorf("clock next due: %w", translateError(err))
	}
	if t == nil {
		return time.Time{}, nil
	}
	return *t, nil
}
