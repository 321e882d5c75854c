package scenario

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/cairnrun/cairn/bench/internal/report"
)

// Floor measures what the machine's PostgreSQL can do at all: pgbench -N (the
// TPC-B-like script without the hot branch and teller updates) with 1 and 8
// clients, and pg_test_fsync's fdatasync rate. Its metrics are copied into
// throughput.json.
func Floor(ctx context.Context, e *Env) *report.Result {
	r := e.NewResult("pgbench")
	r.Settings["pgbench"] = fmt.Sprintf("pgbench -i (scale 1) on database pgbench; pgbench -N -T %d with -c 1 -j 1 and -c 8 -j 2, over TCP on 127.0.0.1", e.Scale.PgbenchSeconds)
	r.Settings["pg_test_fsync"] = "pg_test_fsync -s 1 in the benchmark's scratch folder (same file system as the data directory); fdatasync of one 8 kB write"
	err := floor(ctx, e, r)
	r.Finish(err)
	return r
}

var (
	tpsPattern   = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)
	latPattern   = regexp.MustCompile(`latency average = ([0-9.]+) ms`)
	txPattern    = regexp.MustCompile(`number of transactions actually processed: ([0-9]+)`)
	fsyncPattern = regexp.MustCompile(`(?m)^\s+fdatasync\s+([0-9.]+) ops/sec`)
)

func floor(ctx context.Context, e *Env, r *report.Result) error {
	if e.Scale.FsyncTest {
		e.Logf("pg_test_fsync")
		out, err := exec.CommandContext(ctx, filepath.Join(e.PG.BinDir, "pg_test_fsync"), "-s", "1",
			"-f", filepath.Join(e.Work, "pg_test_fsync.out")).CombinedOutput()
		if err != nil {
			return fmt.Errorf("pg_test_fsync: %w: %s", err, out)
		}
		if m := fsyncPattern.FindSubmatch(out); m != nil {
			v, _ := strconv.ParseFloat(string(m[1]), 64)
			r.Set("fdatasync_ops_per_s", v)
		}
	}
	if err := e.PG.CreateDatabase(ctx, "pgbench"); err != nil {
		return err
	}
	pgbench := filepath.Join(e.PG.BinDir, "pgbench")
	conn := []string{"-h", "127.0.0.1", "-p", strconv.Itoa(e.PG.Port), "-U", "bench"}
	e.Logf("pgbench -i")
	if out, err := exec.CommandContext(ctx, pgbench, append(append([]string{"-i", "-q"}, conn...), "pgbench")...).CombinedOutput(); err != nil {
		return fmt.Errorf("pgbench -i: %w: %s", err, out)
	}
	if _, err := e.DB.Exec(ctx, "CHECKPOINT"); err != nil {
		return err
	}
	for _, c := range []struct{ clients, threads int }{{1, 1}, {8, 2}} {
		e.Logf("pgbench -N -c %d for %d s", c.clients, e.Scale.PgbenchSeconds)
		args := append([]string{"-N", "-c", strconv.Itoa(c.clients), "-j", strconv.Itoa(c.threads),
			"-T", strconv.Itoa(e.Scale.PgbenchSeconds)}, conn...)
		cpu0 := e.PG.CPUSeconds()
		out, err := exec.CommandContext(ctx, pgbench, append(args, "pgbench")...).CombinedOutput()
		cpu := e.PG.CPUSeconds() - cpu0
		if err != nil {
			return fmt.Errorf("pgbench -N -c %d: %w: %s", c.clients, err, out)
		}
		m := tpsPattern.FindSubmatch(out)
		if m == nil {
			return fmt.Errorf("pgbench -N -c %d: no tps in its output: %s", c.clients, strings.TrimSpace(string(out)))
		}
		tps, _ := strconv.ParseFloat(string(m[1]), 64)
		r.Set(fmt.Sprintf("pgbench_tps_%d", c.clients), tps)
		if m := txPattern.FindSubmatch(out); m != nil {
			tx, _ := strconv.ParseFloat(string(m[1]), 64)
			r.Set(fmt.Sprintf("postgres_cpu_ms_per_tx_%d", c.clients), cpu*1000/tx)
		}
		if m := latPattern.FindSubmatch(out); m != nil {
			lat, _ := strconv.ParseFloat(string(m[1]), 64)
			r.Set(fmt.Sprintf("pgbench_latency_ms_%d", c.clients), lat)
		}
	}
	return nil
}
