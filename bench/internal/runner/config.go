// Package runner sets up the benchmark's servers, runs the chosen scenarios in
// order and reports.
package runner

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/cairnrun/cairn/bench/internal/scenario"
)

// Scenario names, in the order they run.
var allScenarios = []string{"pgbench", "river", "dbos", "throughput", "latency", "fanout", "api", "large_output", "recovery", "wake", "events", "map", "startup", "list", "growth", "exec"}

// Config is the benchmark's configuration.
type Config struct {
	CairnBin   string
	ResultsDir string
	Scenarios  map[string]bool
	Quick      bool
	Keep       bool
	Scale      scenario.Scale
}

// scaleFlag is a flag that sizes a scenario, with its value for the published run
// and for the smoke run (BENCH_QUICK=1).
type scaleFlag struct {
	name, usage string
	dst         *int
	full, quick int
}

// ParseFlags reads the command line. BENCH_QUICK=1 (or -quick) switches every scale
// flag not given explicitly to its quick value and the results to
// bench/results-quick.
func ParseFlags(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	var cfg Config
	s := &cfg.Scale
	scales := []scaleFlag{
		{"throughput-runs", "throughput: 10-step runs in flight", &s.ThroughputRuns, 2000, 200},
		{"throughput-concurrency", "throughput: CAIRN_CONCURRENCY of an extra one-dispatcher round (0: none; Cairn's default is 128)", &s.ThroughputConcurrency, 0, 0},
		{"latency-runs", "latency: 10-step runs, one at a time", &s.LatencyRuns, 50, 10},
		{"fanout-width", "fanout: parallel steps between root and join", &s.FanoutWidth, 1000, 100},
		{"api-requests", "api: requests per serial measurement (4× with concurrent clients)", &s.APIRequests, 500, 100},
		{"api-clients", "api: concurrent clients", &s.APIClients, 16, 16},
		{"large-mib", "large_output: MiB printed by the step", &s.LargeMiB, 1024, 64},
		{"recovery-runs", "recovery: steps in flight at the kill", &s.RecoveryRuns, 500, 100},
		{"wake-runs", "wake: runs sleeping 5 s, woken on one dispatcher of concurrency 4", &s.WakeRuns, 10_000, 1_000},
		{"events-sent", "events: events sent per measurement (matching 10 triggers; completing waits)", &s.EventsSent, 2000, 200},
		{"event-waits", "events: runs waiting on distinct keys while events complete them", &s.EventWaits, 10_000, 1_000},
		{"map-items", "map: items of one map (max_parallel 200), a dispatcher SIGKILLed a third of the way", &s.MapItems, 100_000, 10_000},
		{"startup-runs", "startup: non-terminal runs in the database", &s.StartupRuns, 100_000, 10_000},
		{"list-runs", "list: runs in the catalog, inserted with SQL", &s.ListRuns, 1_000_000, 50_000},
		{"growth-runs", "growth: finished 10-step runs (with attempts and events) filled in with SQL", &s.GrowthRuns, 500_000, 50_000},
		{"list-requests", "list: listings per filter (first page and up to 3 following)", &s.ListRequests, 200, 50},
		{"river-jobs", "river: jobs burned down per configuration", &s.RiverJobs, 50_000, 5_000},
		{"pgbench-seconds", "pgbench: seconds per run", &s.PgbenchSeconds, 20, 3},
		{"exec-runs", "exec: runs of the 10-step chain of no-op exec steps per variant and round, one at a time", &s.ExecRuns, 5, 2},
		{"exec-items", "exec: items of the map of no-op exec steps (max_parallel 10)", &s.ExecItems, 300, 100},
		{"exec-rounds", "exec: alternated rounds of every variant", &s.ExecRounds, 3, 1},
	}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.CairnBin, "cairn", "bin/cairn", "the cairn binary")
	fs.StringVar(&cfg.ResultsDir, "results", "", "folder for <scenario>.json (default bench/results, or bench/results-quick with -quick)")
	scenarios := fs.String("scenarios", strings.Join(allScenarios, ","), "comma-separated scenarios to run: "+strings.Join(allScenarios, ", "))
	fs.BoolVar(&cfg.Quick, "quick", getenv("BENCH_QUICK") == "1", "smoke run at small scale (env BENCH_QUICK=1)")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the scratch folder (data, logs) and print its path")
	fs.BoolVar(&s.FsyncTest, "fsync-test", true, "pgbench: also run pg_test_fsync, about 15 s (default off with -quick)")
	for _, f := range scales {
		fs.IntVar(f.dst, f.name, f.full, fmt.Sprintf("%s (quick: %d)", f.usage, f.quick))
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if cfg.Quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for _, f := range scales {
			if !set[f.name] {
				*f.dst = f.quick
			}
		}
		if !set["fsync-test"] {
			s.FsyncTest = false
		}
	}
	for _, f := range scales {
		if *f.dst <= 0 && f.name != "throughput-concurrency" {
			return cfg, fmt.Errorf("-%s must be positive", f.name)
		}
	}
	if s.RecoveryRuns < 2 {
		return cfg, fmt.Errorf("-recovery-runs must be at least 2")
	}
	if cfg.ResultsDir == "" {
		cfg.ResultsDir = "bench/results"
		if cfg.Quick {
			cfg.ResultsDir = "bench/results-quick"
		}
	}
	cfg.Scenarios = map[string]bool{}
	for _, name := range strings.Split(*scenarios, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if !slices.Contains(allScenarios, name) {
			return cfg, fmt.Errorf("unknown scenario %q (want %s)", name, strings.Join(allScenarios, ", "))
		}
		cfg.Scenarios[name] = true
	}
	return cfg, nil
}
