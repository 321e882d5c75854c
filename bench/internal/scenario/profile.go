package scenario

import (
	"context"
	"fmt"
	"time"
)

// dbCounters are cumulative server counters, read before and after a measurement.
type dbCounters struct {
	Commits    float64 // transactions committed in the catalog database
	Rollbacks  float64
	WALBytes   float64
	WALRecords float64
	WALSyncs   float64 // WAL flushes to disk (fsync/fdatasync)
	WALWrites  float64
}

// settleStats waits until every idle backend has flushed its pending statistics.
// A backend reports its counters (pg_stat_database, pg_stat_user_tables, pg_stat_wal)
// at the end of a transaction at most once a second; what is left pending when it
// goes idle is flushed by a timer after PGSTAT_IDLE_INTERVAL (10 s), or when it exits.
// pg_stat_statements is not delayed.
func settleStats(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(11 * time.Second):
	}
}

func (e *Env) counters(ctx context.Context) (dbCounters, error) {
	var c dbCounters
	// See settleStats: callers read these after the backends that did the work
	// exited, or after settleStats.
	err := e.DB.QueryRow(ctx, `
SELECT d.xact_commit, d.xact_rollback, w.wal_bytes, w.wal_records, w.wal_sync, w.wal_write
FROM pg_stat_database d, pg_stat_wal w WHERE d.datname = current_database()`).
		Scan(&c.Commits, &c.Rollbacks, &c.WALBytes, &c.WALRecords, &c.WALSyncs, &c.WALWrites)
	if err != nil {
		return c, fmt.Errorf("read database counters: %w", err)
	}
	return c, nil
}

func (c dbCounters) sub(o dbCounters) dbCounters {
	return dbCounters{
		Commits: c.Commits - o.Commits, Rollbacks: c.Rollbacks - o.Rollbacks,
		WALBytes: c.WALBytes - o.WALBytes, WALRecords: c.WALRecords - o.WALRecords,
		WALSyncs: c.WALSyncs - o.WALSyncs, WALWrites: c.WALWrites - o.WALWrites,
	}
}

// Statement is one line of pg_stat_statements.
type Statement struct {
	Query    string  `json:"query"`
	TopLevel bool    `json:"toplevel"`
	Calls    int64   `json:"calls"`
	Rows     int64   `json:"rows"`
	TotalMS  float64 `json:"total_ms"`
	MeanMS   float64 `json:"mean_ms"`
	// SharedBlksHit and SharedBlksRead: buffer accesses, found in cache or not.
	SharedBlksHit  int64 `json:"shared_blks_hit"`
	SharedBlksRead int64 `json:"shared_blks_read"`
	// WALBytes the statement generated.
	WALBytes float64 `json:"wal_bytes"`
}

// resetStatements clears pg_stat_statements.
func (e *Env) resetStatements(ctx context.Context) error {
	_, err := e.DB.Exec(ctx, `SELECT pg_stat_statements_reset()`)
	return err
}

// topStatements returns Cairn's statements (role CatalogRole; the benchmark's own
// queries run as another role) by total execution time.
// With pg_stat_statements.track = all, statements run inside the catalog's PL/pgSQL
// functions appear too (toplevel false); their time is also part of the calling
// statement's.
func (e *Env) topStatements(ctx context.Context, limit int) ([]Statement, error) {
	rows, err := e.DB.Query(ctx, `
SELECT left(regexp_replace(query, '\s+', ' ', 'g'), 300), toplevel, calls, rows,
       total_exec_time, mean_exec_time, shared_blks_hit, shared_blks_read, wal_bytes::float8
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND userid = (SELECT oid FROM pg_roles WHERE rolname = '`+CatalogRole+`')
ORDER BY total_exec_time DESC
LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("read pg_stat_statements: %w", err)
	}
	defer rows.Close()
	var out []Statement
	for rows.Next() {
		var s Statement
		if err := rows.Scan(&s.Query, &s.TopLevel, &s.Calls, &s.Rows, &s.TotalMS, &s.MeanMS,
			&s.SharedBlksHit, &s.SharedBlksRead, &s.WALBytes); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// topLevelCalls sums the calls of top-level statements (BEGIN and COMMIT included:
// track_utility is on): the catalog's round trips; their execution time, and
// their buffer accesses (a statement's include those of the functions it calls).
//
// An autoanalyze of runs is not a round trip: it computes cairn_label_pairs for
// the statistics on it (migration 00033), and pg_stat_statements files each call
// of the SQL function's statement as a top-level one of Cairn's role (under an
// ANALYZE statement, the same calls are nested). Those are left out.
//
// plans and planMS are the plans PostgreSQL made of Cairn's statements, nested
// ones included (a prepared statement is planned again for its first five calls
// on each connection unless told to keep its generic plan), and their time.
func (e *Env) topLevelCalls(ctx context.Context) (calls, execMS, buffers, plans, planMS float64, err error) {
	err = e.DB.QueryRow(ctx, `
SELECT coalesce(sum(calls) FILTER (WHERE toplevel), 0)::float8,
       coalesce(sum(total_exec_time) FILTER (WHERE toplevel), 0)::float8,
       coalesce(sum(shared_blks_hit + shared_blks_read) FILTER (WHERE toplevel), 0)::float8,
       coalesce(sum(plans), 0)::float8, coalesce(sum(total_plan_time), 0)::float8
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND userid = (SELECT oid FROM pg_roles WHERE rolname = '`+CatalogRole+`')
  AND query NOT LIKE '%FROM jsonb_each_text(p_labels)%' -- cairn_label_pairs' body`).Scan(&calls, &execMS, &buffers, &plans, &planMS)
	return calls, execMS, buffers, plans, planMS, err
}

// SQLProfile is what Cairn's SQL cost per unit of work (a step, a create-run, a
// get-run) since the last resetStatements.
type SQLProfile struct {
	Per   string  `json:"per"`
	Count float64 `json:"count"`
	// RoundTripsPer counts top-level statements, BEGIN and COMMIT included.
	RoundTripsPer float64 `json:"round_trips_per"`
	// SQLExecMSPer is the server-side execution time of the top-level statements.
	SQLExecMSPer float64 `json:"sql_exec_ms_per"`
	// BuffersPer counts the top-level statements' buffer accesses (shared_blks_hit
	// and _read): the work of their plans, which the machine's speed does not move.
	BuffersPer float64 `json:"buffers_per"`
	// PlansPer and PlanMSPer are the plans made of its statements, nested ones
	// included, and their time (pg_stat_statements.track_planning).
	PlansPer   float64     `json:"plans_per"`
	PlanMSPer  float64     `json:"plan_ms_per"`
	Statements []Statement `json:"statements"`
}

// sqlProfile reads pg_stat_statements for count units of work named per.
func (e *Env) sqlProfile(ctx context.Context, per string, count float64, top int) (*SQLProfile, error) {
	calls, execMS, buffers, plans, planMS, err := e.topLevelCalls(ctx)
	if err != nil {
		return nil, err
	}
	p := &SQLProfile{Per: per, Count: count, RoundTripsPer: calls / count, SQLExecMSPer: execMS / count, BuffersPer: buffers / count,
		PlansPer: plans / count, PlanMSPer: planMS / count}
	if p.Statements, err = e.topStatements(ctx, top); err != nil {
		return nil, err
	}
	return p, nil
}

// Profile is one entry of profile.json: a *Round or a *SQLProfile.
type Profile struct {
	Name  string `json:"name"`
	Value any    `json:"value"`
}

// AddProfile files a profile under name for profile.json.
func (e *Env) AddProfile(name string, v any) {
	e.Profiles = append(e.Profiles, Profile{Name: name, Value: v})
}

// TableStats are a table's access counters over a measurement (pg_stat_user_tables):
// sequential scans and the rows they read (a sign of a missing index or a bad plan),
// index scans, updates and how many were HOT (no index touched), dead rows left.
type TableStats struct {
	Table       string  `json:"table"`
	SeqScan     float64 `json:"seq_scan"`
	SeqTupRead  float64 `json:"seq_tup_read"`
	IdxScan     float64 `json:"idx_scan"`
	Inserts     float64 `json:"n_tup_ins"`
	Updates     float64 `json:"n_tup_upd"`
	HOTUpdates  float64 `json:"n_tup_hot_upd"`
	Deletes     float64 `json:"n_tup_del"`
	DeadTuples  float64 `json:"n_dead_tup"`
	Autovacuums float64 `json:"autovacuum_count"`
	Autoanalyze float64 `json:"autoanalyze_count"`
}

// tableStats reads the catalog's tables' counters (see settleStats).
func (e *Env) tableStats(ctx context.Context) (map[string]TableStats, error) {
	rows, err := e.DB.Query(ctx, `
SELECT relname, coalesce(seq_scan, 0)::float8, coalesce(seq_tup_read, 0)::float8, coalesce(idx_scan, 0)::float8,
       n_tup_ins::float8, n_tup_upd::float8, n_tup_hot_upd::float8, n_tup_del::float8, n_dead_tup::float8,
       autovacuum_count::float8, autoanalyze_count::float8
FROM pg_stat_user_tables WHERE relname IN ('runs', 'steps', 'attempts', 'events')`)
	if err != nil {
		return nil, fmt.Errorf("read table statistics: %w", err)
	}
	defer rows.Close()
	out := map[string]TableStats{}
	for rows.Next() {
		var t TableStats
		if err := rows.Scan(&t.Table, &t.SeqScan, &t.SeqTupRead, &t.IdxScan, &t.Inserts, &t.Updates,
			&t.HOTUpdates, &t.Deletes, &t.DeadTuples, &t.Autovacuums, &t.Autoanalyze); err != nil {
			return nil, err
		}
		out[t.Table] = t
	}
	return out, rows.Err()
}

// tableDelta returns after − before per table (dead tuples as read after).
func tableDelta(before, after map[string]TableStats) []TableStats {
	var out []TableStats
	for _, name := range []string{"runs", "steps", "attempts", "events"} {
		a, b := after[name], before[name]
		out = append(out, TableStats{
			Table: name, SeqScan: a.SeqScan - b.SeqScan, SeqTupRead: a.SeqTupRead - b.SeqTupRead,
			IdxScan: a.IdxScan - b.IdxScan, Inserts: a.Inserts - b.Inserts, Updates: a.Updates - b.Updates,
			HOTUpdates: a.HOTUpdates - b.HOTUpdates, Deletes: a.Deletes - b.Deletes, DeadTuples: a.DeadTuples,
			Autovacuums: a.Autovacuums - b.Autovacuums, Autoanalyze: a.Autoanalyze - b.Autoanalyze,
		})
	}
	return out
}
