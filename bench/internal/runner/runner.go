package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cairnrun/cairn/bench/internal/cairn"
	"github.com/cairnrun/cairn/bench/internal/pgserver"
	"github.com/cairnrun/cairn/bench/internal/proc"
	"github.com/cairnrun/cairn/bench/internal/report"
	"github.com/cairnrun/cairn/bench/internal/s3server"
	"github.com/cairnrun/cairn/bench/internal/scenario"
)

// bucket is the blob store bucket of every cairn process.
const bucket = "cairn-bench"

// pgSettings are the server's settings: durable (fsync and synchronous_commit on:
// the headline), PostgreSQL's defaults otherwise, plus pg_stat_statements tracking
// nested statements so the profile sees inside the catalog's PL/pgSQL functions,
// and their planning.
func pgSettings() map[string]string {
	return map[string]string{
		"fsync":                             "on",
		"synchronous_commit":                "on",
		"full_page_writes":                  "on",
		"max_connections":                   "300",
		"shared_buffers":                    "128MB",
		"shared_preload_libraries":          "pg_stat_statements",
		"pg_stat_statements.track":          "all",
		"pg_stat_statements.max":            "5000",
		"pg_stat_statements.track_planning": "on",
		"logging_collector":                 "off",
		"log_min_messages":                  "warning",
		"max_wal_size":                      "1GB",
		"checkpoint_completion_target":      "0.9",
	}
}

// Run sets up the servers, runs the scenarios of cfg, writes their results and
// prints the table. A scenario that fails is reported as such; the others still run.
func Run(ctx context.Context, cfg Config, stdout, stderr io.Writer) (err error) {
	bin, err := filepath.Abs(cfg.CairnBin)
	if err != nil {
		return err
	}
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("cairn binary: %w (build it with `make build`)", err)
	}
	work, err := os.MkdirTemp("", "cairn-bench-")
	if err != nil {
		return err
	}
	// PostgreSQL runs as another account when we are root: it must enter the folder.
	if err := os.Chmod(work, 0o755); err != nil {
		return err
	}
	defer func() {
		if cfg.Keep || err != nil {
			fmt.Fprintf(stderr, "bench: scratch folder kept: %s\n", work)
			return
		}
		_ = os.RemoveAll(work)
	}()
	e := &scenario.Env{Work: work, CairnBin: bin, Bucket: bucket, Scale: cfg.Scale, Log: stderr, PGSettings: pgSettings()}
	e.Logf("scratch folder %s", work)

	e.Logf("starting PostgreSQL")
	e.PG, err = pgserver.Start(ctx, pgserver.Config{DataDir: filepath.Join(work, "pg"), Settings: e.PGSettings})
	if err != nil {
		return err
	}
	defer e.PG.Stop()
	if err := prepareCatalog(ctx, e); err != nil {
		return err
	}

	e.Logf("starting versitygw")
	e.S3, err = s3server.Start(ctx, filepath.Join(work, "s3"), bucket)
	if err != nil {
		return err
	}
	defer e.S3.Stop()

	// The catalog's pool and the API server; a scenario may move them to a copy
	// of the catalog (Env.UseCatalog), so they are closed as they are at the end.
	defer e.Disconnect()
	if err := e.Connect(ctx); err != nil {
		return err
	}

	e.Machine = proc.Host()
	var pgVersion string
	if err := e.DB.QueryRow(ctx, `SHOW server_version`).Scan(&pgVersion); err != nil {
		return err
	}
	e.Machine.PGVersion = pgVersion
	e.Versions = versions(bin, pgVersion, e.S3.Version)

	var results []*report.Result
	var floor, peer, dbosPeer *report.Result
	add := func(r *report.Result) {
		results = append(results, r)
		if r.Error != "" {
			fmt.Fprintf(stderr, "bench: %s failed: %s\n", r.Scenario, r.Error)
		}
		if werr := r.Write(cfg.ResultsDir); werr != nil {
			fmt.Fprintf(stderr, "bench: write %s: %v\n", r.Scenario, werr)
		}
	}
	start := time.Now()
	for _, name := range allScenarios {
		if !cfg.Scenarios[name] || ctx.Err() != nil {
			continue
		}
		switch name {
		case "pgbench":
			floor = scenario.Floor(ctx, e)
			add(floor)
		case "river":
			peer = scenario.River(ctx, e)
			add(peer)
		case "dbos":
			dbosPeer = scenario.DBOS(ctx, e)
			add(dbosPeer)
		case "throughput":
			add(scenario.Throughput(ctx, e, floor, peer, dbosPeer))
		case "latency":
			add(scenario.Latency(ctx, e))
		case "fanout":
			add(scenario.Fanout(ctx, e))
		case "api":
			add(scenario.API(ctx, e))
		case "large_output":
			add(scenario.LargeOutput(ctx, e))
		case "recovery":
			add(scenario.Recovery(ctx, e))
		case "wake":
			add(scenario.Wake(ctx, e))
		case "events":
			add(scenario.Events(ctx, e))
		case "map":
			add(scenario.Map(ctx, e))
		case "startup":
			add(scenario.Startup(ctx, e))
		case "list":
			add(scenario.List(ctx, e))
		case "growth":
			add(scenario.Growth(ctx, e))
		case "exec":
			add(scenario.Exec(ctx, e))
		}
	}
	fmt.Fprintf(stdout, "\nCairn benchmark (%s, %d CPUs, load average %.2f at the end; %s)\n\n",
		e.Machine.CPUModel, e.Machine.CPUs, proc.LoadAverage()[0], time.Since(start).Round(time.Second))
	report.Table(stdout, results)
	if len(e.Profiles) > 0 {
		if err := writeProfile(cfg.ResultsDir, e.Profiles); err != nil {
			fmt.Fprintf(stderr, "bench: write profile: %v\n", err)
		}
		printProfiles(stdout, e.Profiles)
	}
	if f, err := os.Create(filepath.Join(cfg.ResultsDir, "table.md")); err == nil {
		report.Markdown(f, tableResults(cfg.ResultsDir, results))
		f.Close()
	}
	fmt.Fprintf(stdout, "\nresults in %s\n", cfg.ResultsDir)
	if err := ctx.Err(); err != nil {
		return err
	}
	// A slow machine never fails the benchmark; a scenario that could not finish
	// (runs failing, a server not starting) does, once everything is written.
	var failed []string
	for _, r := range results {
		if r.Error != "" {
			failed = append(failed, r.Scenario)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("scenarios that could not finish: %s", strings.Join(failed, ", "))
	}
	return nil
}

// prepareCatalog creates Cairn's role and database, pg_stat_statements in it, and
// runs `cairn migrate up`.
func prepareCatalog(ctx context.Context, e *scenario.Env) error {
	pool, err := pgxpool.New(ctx, e.PG.URL("postgres"))
	if err != nil {
		return err
	}
	for _, q := range []string{
		`CREATE ROLE ` + scenario.CatalogRole + ` LOGIN`,
		`CREATE DATABASE ` + scenario.CatalogDB + ` OWNER ` + scenario.CatalogRole,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			pool.Close()
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	pool.Close()
	pool, err = pgxpool.New(ctx, e.PG.URL(scenario.CatalogDB))
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE EXTENSION pg_stat_statements`); err != nil {
		return err
	}
	return cairn.Migrate(ctx, e.CairnBin, e.PG.URLAs(scenario.CatalogRole, scenario.CatalogDB))
}

func versions(bin, pg, versitygw string) map[string]string {
	v := map[string]string{"cairn": cairn.Version(bin), "postgres": pg, "versitygw": versitygw}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			switch d.Path {
			case "github.com/riverqueue/river", "github.com/dbos-inc/dbos-transact-golang", "github.com/jackc/pgx/v5", "github.com/minio/minio-go/v7":
				v[strings.TrimPrefix(d.Path, "github.com/")] = d.Version
			}
		}
	}
	return v
}

func writeProfile(dir string, profiles []scenario.Profile) error {
	b, err := json.MarshalIndent(map[string]any{
		"about": "Where the time went. pg_stat_statements for Cairn's role only (the benchmark's own queries run as another role), track = all: " +
			"statements inside the catalog's PL/pgSQL functions appear with toplevel false, and their time is also inside the calling statement's. " +
			"Round trips are top-level statements, BEGIN and COMMIT included. Throughput rounds add database counters, CPU per step and the dispatchers' own counters.",
		"profiles": profiles,
	}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "profile.json"), append(b, '\n'), 0o644)
}

func printProfiles(w io.Writer, profiles []scenario.Profile) {
	for _, pr := range profiles {
		var sql *scenario.SQLProfile
		switch v := pr.Value.(type) {
		case *scenario.Round:
			p := v.Profile
			if p == nil {
				continue
			}
			fmt.Fprintf(w, "\nProfile: %s, %d steps at %.0f steps/s\n", pr.Name, v.Steps, v.StepsPerS)
			fmt.Fprintf(w, "  per step: %.2f commits, %.0f WAL bytes, %.2f WAL flushes; CPU %.3f ms cairn + %.3f ms postgres; claim batch %.1f, finish batch %.1f\n",
				p.CommitsPerStep, p.WALBytesPerStep, p.WALSyncsPerStep, p.CairnCPUMSPerStep, p.PostgresCPUMSPerStep, p.ClaimBatch, p.FinishBatch)
			sql = p.SQL
		case *scenario.SQLProfile:
			fmt.Fprintf(w, "\nProfile: %s\n", pr.Name)
			sql = v
		case *scenario.FanoutProfile:
			fmt.Fprintf(w, "\nProfile: %s\n", pr.Name)
			sql = v.SQL
		}
		if sql == nil {
			continue
		}
		fmt.Fprintf(w, "  per %s: %.2f round trips, %.3f ms SQL execution, %.4f plans (%.3f ms)\n", sql.Per, sql.RoundTripsPer, sql.SQLExecMSPer, sql.PlansPer, sql.PlanMSPer)
		fmt.Fprintf(w, "  %10s %9s %9s %6s  %s\n", "total_ms", "calls", "mean_ms", "level", "query")
		for i, s := range sql.Statements {
			if i == 8 {
				break
			}
			level := "nested"
			if s.TopLevel {
				level = "top"
			}
			q := s.Query
			if len(q) > 100 {
				q = q[:100] + "…"
			}
			fmt.Fprintf(w, "  %10.0f %9d %9.3f %6s  %s\n", s.TotalMS, s.Calls, s.MeanMS, level, q)
		}
	}
}

// tableResults are the results table.md shows: this run's, and those of the
// scenarios it did not run as their <scenario>.json in dir holds them, so that
// a run of some scenarios updates their rows and leaves the others'.
func tableResults(dir string, ran []*report.Result) []*report.Result {
	byName := map[string]*report.Result{}
	for _, r := range ran {
		byName[r.Scenario] = r
	}
	var out []*report.Result
	for _, name := range allScenarios {
		if r := byName[name]; r != nil {
			out = append(out, r)
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name+".json"))
		if err != nil {
			continue
		}
		var r report.Result
		if json.Unmarshal(b, &r) == nil && r.Scenario == name {
			out = append(out, &r)
		}
	}
	return out
}
