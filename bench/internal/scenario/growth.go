package scenario

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cairnrun/cairn/bench/internal/cairn"
	"github.com/cairnrun/cairn/bench/internal/report"
)

// growthBatch is how many runs one transaction of the fill copies.
const growthBatch = 10_000

// growthSpread is how far back the filled runs' timestamps go: a month of traffic.
const growthSpread = 30 * 24 * time.Hour

// Growth measures throughput, step-to-step latency, create-run and get-run on an
// empty catalog, then fills the catalog with GrowthRuns finished runs (bulk-loaded
// with SQL) and measures the same on it and on an empty copy of the catalog in
// turn, five times in the same run: each figure filled ÷ empty. The measurements
// are the throughput, latency and api scenarios' own (burnRound, measureLatency,
// measureAPI), at their scales.
func Growth(ctx context.Context, e *Env) *report.Result {
	r := e.NewResult("growth")
	r.Settings["runs"] = e.Scale.GrowthRuns
	r.Settings["fill"] = fmt.Sprintf("copies of one finished run of the %d-step noop chain (its run, steps, step_edges, attempts and events rows, every column copied: %d steps, %d attempts, about 2 events per step), bulk-loaded with INSERT … SELECT generate_series in transactions of %d runs; UUIDv7 ids and timestamps spread over the %s before the template; then VACUUM ANALYZE and CHECKPOINT",
		cairn.ChainSteps, cairn.ChainSteps, cairn.ChainSteps, growthBatch, growthSpread)
	r.Settings["measured"] = fmt.Sprintf("on the empty catalog (emptied before each figure) before the fill; then five times, one after the other, on the filled catalog and on an empty copy of the catalog (made with CREATE DATABASE … TEMPLATE after the deploy, emptied before each figure) in turn: filled, empty, filled, empty, filled (rounds: each figure in that order), with autovacuum off for the run tables of both catalogs (storage parameter autovacuum_enabled; rounds.autovacuums counts what still ran); a filled figure is its three weighted 1, 2, 1, an empty one its two's mean, both centred on the same moment (the figures before the fill are reported, _empty_before_fill, not compared): steps/s of the throughput scenario's 1-dispatcher round (%d runs); step-to-step p50 of the latency scenario (%d runs); create-run and get-run p50 of the api scenario, one client (%d requests)",
		e.Scale.ThroughputRuns, e.Scale.LatencyRuns, e.Scale.APIRequests)
	r.Settings["ratios"] = "steps_per_s_ratio = filled ÷ empty (goal ≥ 0.9); the latency ratios filled ÷ empty (goal ≤ 1.1); buffers_per_step_ratio, no goal: the throughput round's buffer accesses per step (pg_stat_statements, top-level statements), filled ÷ empty, which the machine's speed does not move (deeper indexes alone make it ≈ 1.2; a plan that reads what it need not shows as several times that)"
	err := growth(ctx, e, r)
	r.AtLeast("steps_per_s_ratio", 0.9)
	r.AtMost("step_to_step_p50_ratio", 1.1)
	r.AtMost("create_run_p50_ratio", 1.1)
	r.AtMost("get_run_p50_ratio", 1.1)
	r.Finish(err)
	return r
}

// growthFigures are the four figures growth compares.
type growthFigures struct {
	StepsPerS, StepToStepP50, CreateP50, GetP50 float64
	// BuffersPerStep are the buffer accesses of the throughput round's SQL per
	// step: the work of its plans, which the machine's speed does not move.
	BuffersPerStep float64
	// Template is a finished chain run of the latency measurement (the fill copies it).
	Template string
	// Autovacuums counts the autovacuums and autoanalyzes of the catalog's tables
	// that ended during the figures (pg_stat_user_tables): work in the background
	// that a large catalog needs, and that takes the machine's time.
	Autovacuums float64
}

// growthEmptyDB is the empty copy of the catalog the empty figures are taken on.
const growthEmptyDB = "cairn_growth_empty"

func growth(ctx context.Context, e *Env, r *report.Result) error {
	start := time.Now()
	if err := e.DeployFresh(ctx, cairn.ChainBundle()); err != nil {
		return err
	}
	// A copy of the catalog as deployed, with no run: the empty catalog the
	// figures between the filled ones are taken on.
	if err := e.CopyCatalog(ctx, growthEmptyDB); err != nil {
		return err
	}
	defer func() {
		ctx := context.WithoutCancel(ctx)
		if err := e.UseCatalog(ctx, CatalogDB); err != nil {
			e.Logf("growth: back to the catalog: %v", err)
		}
		_ = e.DropCatalog(ctx, growthEmptyDB)
		_ = e.ResetCatalog(ctx)
		_ = e.setAutovacuum(ctx, true)
	}()
	// The figures before the fill: their latency round's runs are the template
	// the fill copies.
	first, err := growthMeasure(ctx, e, "empty catalog, before the fill", true)
	if err != nil {
		return err
	}
	fillStart := time.Now()
	if err := e.fillFinishedRuns(ctx, first.Template, e.Scale.GrowthRuns); err != nil {
		return err
	}
	r.Set("fill_s", time.Since(fillStart).Seconds())
	var size int64
	if err := e.DB.QueryRow(ctx, `SELECT pg_database_size(current_database())`).Scan(&size); err != nil {
		return err
	}
	r.Set("filled_database_mib", float64(size)/(1<<20))
	// Filled, empty, filled, empty, filled: the machine's speed drifts by a third
	// within minutes on a small VM, and one figure after the other would count
	// the drift as growth. The filled figures weighted 1, 2, 1 and the empty ones
	// 1, 1 are centred on the same moment, so a steady drift cancels, and each
	// side is measured more than once.
	var filled, empty []*growthFigures
	for i := range 5 {
		db, phase := CatalogDB, fmt.Sprintf("filled catalog, %d of 3", i/2+1)
		if i%2 == 1 {
			db, phase = growthEmptyDB, fmt.Sprintf("empty copy of the catalog, %d of 2", i/2+1)
		}
		if err := e.UseCatalog(ctx, db); err != nil {
			return err
		}
		// No autovacuum during the rounds, on either side: the empty copy's
		// tables, emptied before each figure, crossed its thresholds within a
		// round and were vacuumed and analyzed while it ran (4 to 7 times in
		// the empty rounds of a full run, never in the filled ones, whose
		// thresholds are a fifth of millions of rows), which slowed the empty
		// side alone.
		if err := e.setAutovacuum(ctx, false); err != nil {
			return err
		}
		g, err := growthMeasure(ctx, e, phase, db == growthEmptyDB)
		if err != nil {
			return err
		}
		if db == growthEmptyDB {
			empty = append(empty, g)
		} else {
			filled = append(filled, g)
		}
	}
	rounds := map[string][]float64{}
	for _, f := range []struct {
		name string
		of   func(*growthFigures) float64
	}{
		{"steps_per_s", func(g *growthFigures) float64 { return g.StepsPerS }},
		{"step_to_step_p50", func(g *growthFigures) float64 { return g.StepToStepP50 }},
		{"create_run_p50", func(g *growthFigures) float64 { return g.CreateP50 }},
		{"get_run_p50", func(g *growthFigures) float64 { return g.GetP50 }},
		{"buffers_per_step", func(g *growthFigures) float64 { return g.BuffersPerStep }},
	} {
		unit := "_ms"
		if f.name == "steps_per_s" || f.name == "buffers_per_step" {
			unit = ""
		}
		fv := (f.of(filled[0]) + 2*f.of(filled[1]) + f.of(filled[2])) / 4
		ev := (f.of(empty[0]) + f.of(empty[1])) / 2
		r.Set(f.name+unit+"_empty_before_fill", f.of(first))
		r.Set(f.name+unit+"_empty", ev)
		r.Set(f.name+unit+"_filled", fv)
		r.Set(f.name+"_ratio", fv/ev)
		rounds[f.name+unit] = []float64{f.of(filled[0]), f.of(empty[0]), f.of(filled[1]), f.of(empty[1]), f.of(filled[2])}
	}
	// The background work each side's rounds saw, in all (no goal).
	rounds["autovacuums"] = []float64{filled[0].Autovacuums, empty[0].Autovacuums, filled[1].Autovacuums,
		empty[1].Autovacuums, filled[2].Autovacuums}
	r.Set("autovacuums_filled", filled[0].Autovacuums+filled[1].Autovacuums+filled[2].Autovacuums)
	r.Set("autovacuums_empty", empty[0].Autovacuums+empty[1].Autovacuums)
	r.Settings["rounds"] = rounds
	r.Set("scenario_s", time.Since(start).Seconds())
	return nil
}

// setAutovacuum turns autovacuum on or off for measuredTables in the current
// catalog (a storage parameter; VACUUM and ANALYZE statements still run).
func (e *Env) setAutovacuum(ctx context.Context, on bool) error {
	for _, t := range measuredTables {
		q := `ALTER TABLE ` + pgx.Identifier{t}.Sanitize() + ` SET (autovacuum_enabled = false, toast.autovacuum_enabled = false)`
		if on {
			q = `ALTER TABLE ` + pgx.Identifier{t}.Sanitize() + ` RESET (autovacuum_enabled, toast.autovacuum_enabled)`
		}
		if _, err := e.DB.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// growthMeasure takes the four figures on the catalog as it is; fresh empties the
// catalog before each of them.
func growthMeasure(ctx context.Context, e *Env, phase string, fresh bool) (*growthFigures, error) {
	reset := func() error {
		if !fresh {
			// The same start as an emptied catalog's, without the emptying.
			_, err := e.DB.Exec(ctx, `CHECKPOINT`)
			return err
		}
		return e.ResetCatalog(ctx)
	}
	g := &growthFigures{}
	e.Logf("growth: %s", phase)
	if err := reset(); err != nil {
		return nil, err
	}
	autovacuums := func() (n float64, err error) {
		err = e.DB.QueryRow(ctx, `
SELECT coalesce(sum(autovacuum_count + autoanalyze_count), 0)::float8 FROM pg_stat_user_tables`).Scan(&n)
		return n, err
	}
	vacuumsBefore, err := autovacuums()
	if err != nil {
		return nil, err
	}
	round, err := burnRound(ctx, e, cairn.WorkflowChain, 1, 0)
	if err != nil {
		return nil, err
	}
	e.AddProfile("growth, "+phase+": throughput, 1 dispatcher", &round)
	g.StepsPerS = round.StepsPerS
	g.BuffersPerStep = round.Profile.SQL.BuffersPer
	if err := reset(); err != nil {
		return nil, err
	}
	a, err := measureAPI(ctx, e, 1, e.Scale.APIRequests)
	if err != nil {
		return nil, err
	}
	e.AddProfile("growth, "+phase+": create-run, 1 client", a.CreateSQL)
	e.AddProfile("growth, "+phase+": get-run, 1 client", a.GetSQL)
	g.CreateP50, g.GetP50 = report.Percentile(a.Create, 50), report.Percentile(a.Get, 50)
	// The API's runs are pending (no dispatcher ran them): the latency server
	// would run them first.
	if fresh {
		if err := reset(); err != nil {
			return nil, err
		}
	} else if _, err := e.DB.Exec(ctx, `
WITH p AS (DELETE FROM runs WHERE status = 'pending' RETURNING id),
s AS (DELETE FROM steps USING p WHERE steps.run_id = p.id),
d AS (DELETE FROM step_edges USING p WHERE step_edges.run_id = p.id)
DELETE FROM events USING p WHERE events.run_id = p.id`); err != nil {
		return nil, err
	}
	l, err := measureLatency(ctx, e, e.Scale.LatencyRuns)
	if err != nil {
		return nil, err
	}
	e.AddProfile("growth, "+phase+": latency, one run at a time", l.SQL)
	g.StepToStepP50 = report.Percentile(l.Gaps, 50)
	if err := e.DB.QueryRow(ctx, `
SELECT id::text FROM runs WHERE workflow = $1 AND status = 'succeeded' ORDER BY created_at DESC LIMIT 1`,
		cairn.WorkflowChain).Scan(&g.Template); err != nil {
		return nil, fmt.Errorf("template run: %w", err)
	}
	vacuumsAfter, err := autovacuums()
	if err != nil {
		return nil, err
	}
	g.Autovacuums = vacuumsAfter - vacuumsBefore
	e.Logf("growth: %s: %.0f steps/s, step-to-step p50 %.2f ms, create p50 %.2f ms, get p50 %.3f ms (%.0f autovacuums and autoanalyzes)",
		phase, g.StepsPerS, g.StepToStepP50, g.CreateP50, g.GetP50, g.Autovacuums)
	return g, nil
}

// fillFinishedRuns copies the finished run template n times: every row of every
// table keyed by the run (runs, steps, step_edges, attempts, events, and any
// other with a run_id column), every column copied except the run's id, each
// copy's timestamps moved back by its age (spread over growthSpread) and fresh
// lease tokens (unique in attempts). Each batch of growthBatch runs is one
// transaction. Then VACUUM ANALYZE, a CHECKPOINT and a sync of the file systems.
func (e *Env) fillFinishedRuns(ctx context.Context, template string, n int) error {
	tables, err := e.runTables(ctx, template)
	if err != nil {
		return err
	}
	var created time.Time
	if err := e.DB.QueryRow(ctx, `SELECT created_at FROM runs WHERE id = $1`, template).Scan(&created); err != nil {
		return err
	}
	conn, err := e.DB.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `CREATE TEMP TABLE growth_ids (id uuid PRIMARY KEY, age interval NOT NULL)`); err != nil {
		return err
	}
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), `DROP TABLE IF EXISTS growth_ids`) }()
	e.Logf("growth: filling the catalog with %d finished runs (tables %s)", n, strings.Join(tableNames(tables), ", "))
	start := time.Now()
	for lo := 1; lo <= n; lo += growthBatch {
		hi := min(lo+growthBatch-1, n)
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `TRUNCATE growth_ids`); err != nil {
				return err
			}
			// A UUIDv7 of the copy's creation (as Cairn makes them): 48 bits of
			// milliseconds over a random UUID, version nibble 7.
			if _, err := tx.Exec(ctx, `
INSERT INTO growth_ids (id, age)
SELECT encode(set_byte(b, 6, (get_byte(b, 6) & 15) | 112), 'hex')::uuid, a.age
FROM generate_series($1::int, $2::int) AS g
CROSS JOIN LATERAL (
    SELECT make_interval(secs => $4::float8 * (1 - g::float8 / $3::float8)) + interval '1 hour' AS age OFFSET 0
) a
CROSS JOIN LATERAL (
    SELECT overlay(uuid_send(gen_random_uuid())
                   PLACING substring(int8send(floor(extract(epoch FROM $5::timestamptz - a.age) * 1000)::bigint) FROM 3)
                   FROM 1 FOR 6) AS b
) x`, lo, hi, n, growthSpread.Seconds(), created); err != nil {
				return fmt.Errorf("run ids: %w", err)
			}
			for _, t := range tables {
				if _, err := tx.Exec(ctx, t.copySQL, template); err != nil {
					return fmt.Errorf("copy %s: %w", t.name, err)
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("fill runs %d–%d: %w", lo, hi, err)
		}
		if hi%(10*growthBatch) == 0 || hi == n {
			e.Logf("growth: %d runs filled in %.0f s", hi, time.Since(start).Seconds())
		}
	}
	for _, t := range tables {
		if _, err := e.DB.Exec(ctx, `VACUUM ANALYZE `+pgx.Identifier{t.name}.Sanitize()); err != nil {
			return err
		}
	}
	if _, err = e.DB.Exec(ctx, `CHECKPOINT`); err != nil {
		return err
	}
	// The checkpoint leaves gigabytes of dirty pages to the kernel, which would
	// write them back during the first measurements: measure a filled catalog,
	// not the aftermath of loading it.
	syscall.Sync()
	return nil
}

// runTable is a table with rows of the template run and the statement that copies
// them for each run of growth_ids.
type runTable struct {
	name, copySQL string
}

func tableNames(ts []runTable) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.name)
	}
	return out
}

// runTables lists the tables with rows of run template, runs first and steps
// second (the others reference them), and builds each one's copy statement from
// its columns (generated and identity columns left to their defaults).
func (e *Env) runTables(ctx context.Context, template string) ([]runTable, error) {
	rows, err := e.DB.Query(ctx, `
SELECT c.table_name, c.column_name, c.data_type
FROM information_schema.columns c JOIN information_schema.tables t USING (table_schema, table_name)
WHERE c.table_schema = 'public' AND t.table_type = 'BASE TABLE'
  AND c.is_generated = 'NEVER' AND c.is_identity = 'NO'
  AND c.table_name IN (SELECT table_name FROM information_schema.columns
                       WHERE table_schema = 'public' AND column_name = 'run_id'
                       UNION SELECT 'runs')
ORDER BY CASE c.table_name WHEN 'runs' THEN 0 WHEN 'steps' THEN 1 ELSE 2 END, c.table_name, c.ordinal_position`)
	if err != nil {
		return nil, err
	}
	type column struct{ name, typ string }
	cols := map[string][]column{}
	var order []string
	for rows.Next() {
		var table string
		var c column
		if err := rows.Scan(&table, &c.name, &c.typ); err != nil {
			rows.Close()
			return nil, err
		}
		if _, ok := cols[table]; !ok {
			order = append(order, table)
		}
		cols[table] = append(cols[table], c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var out []runTable
	for _, table := range order {
		key := "run_id"
		if table == "runs" {
			key = "id"
		}
		var has bool
		q := fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %s WHERE %s = $1)`, pgx.Identifier{table}.Sanitize(), key)
		if err := e.DB.QueryRow(ctx, q, template).Scan(&has); err != nil {
			return nil, err
		}
		if !has {
			continue
		}
		var names, exprs []string
		for _, c := range cols[table] {
			col := pgx.Identifier{c.name}.Sanitize()
			names = append(names, col)
			switch {
			case c.name == key:
				exprs = append(exprs, "g.id")
			case c.name == "lease_token":
				exprs = append(exprs, "CASE WHEN t.lease_token IS NOT NULL THEN nextval('lease_token_seq') END")
			case c.typ == "timestamp with time zone":
				exprs = append(exprs, "t."+col+" - g.age")
			default:
				exprs = append(exprs, "t."+col)
			}
		}
		out = append(out, runTable{name: table, copySQL: fmt.Sprintf(`INSERT INTO %s (%s) SELECT %s FROM %s t CROSS JOIN growth_ids g WHERE t.%s = $1`,
			pgx.Identifier{table}.Sanitize(), strings.Join(names, ", "), strings.Join(exprs, ", "), pgx.Identifier{table}.Sanitize(), key)})
	}
	if len(out) == 0 || out[0].name != "runs" {
		return nil, fmt.Errorf("template run %s not found", template)
	}
	return out, nil
}
