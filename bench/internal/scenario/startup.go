package scenario

import (
	"context"
	"fmt"
	"time"

	"github.com/cairnrun/cairn/bench/internal/cairn"
	"github.com/cairnrun/cairn/bench/internal/report"
)

// startupWatch is how long the server is watched after it is ready.
const startupWatch = 3 * time.Second

// Startup inserts StartupRuns pending one-step runs straight into the catalog with
// SQL, then starts `cairn serve` (with its dispatcher) and measures the time from
// exec to the first /readyz 200 and the process's memory.
func Startup(ctx context.Context, e *Env) *report.Result {
	r := e.NewResult("startup")
	r.Settings["runs"] = e.Scale.StartupRuns
	r.Settings["insert"] = "INSERT … SELECT generate_series: runs (pending, random UUIDs) and one ready step each of a one-noop-step workflow, then VACUUM ANALYZE"
	r.Settings["server"] = "`cairn serve` with its dispatcher (default settings); ready = exec to the first /readyz 200, polled every 2 ms"
	r.Settings["watch"] = fmt.Sprintf("after ready, the dispatcher works the backlog for %s: peak RSS and steps done are read then", startupWatch)
	err := startup(ctx, e, r)
	r.AtMost("ready_s", 1)
	r.Finish(err)
	return r
}

func startup(ctx context.Context, e *Env, r *report.Result) error {
	if err := e.DeployFresh(ctx, cairn.OneBundle()); err != nil {
		return err
	}
	// Baseline: an empty catalog.
	servers, err := e.StartDispatchers(ctx, 1, nil)
	if err != nil {
		return err
	}
	r.Set("ready_s_empty", servers[0].Ready.Seconds())
	StopAll(servers)

	e.Logf("startup: inserting %d runs", e.Scale.StartupRuns)
	insertStart := time.Now()
	_, err = e.DB.Exec(ctx, `
WITH v AS (SELECT max(version) AS version FROM workflow_versions WHERE workflow = $1),
r AS (
    INSERT INTO runs (id, workflow, version, steps_total, steps_remaining)
    SELECT gen_random_uuid(), $1, v.version, 1, 1 FROM v, generate_series(1, $2)
    RETURNING id
)
INSERT INTO steps (run_id, key, status, needs, deps_remaining, max_attempts, ready_at)
SELECT id, 'only', 'ready', '{}', 0, 1, now() FROM r`, cairn.WorkflowOne, e.Scale.StartupRuns)
	if err != nil {
		return fmt.Errorf("insert runs: %w", err)
	}
	for _, q := range []string{`VACUUM ANALYZE runs`, `VACUUM ANALYZE steps`, `CHECKPOINT`} {
		if _, err := e.DB.Exec(ctx, q); err != nil {
			return err
		}
	}
	r.Set("insert_s", time.Since(insertStart).Seconds())

	servers, err = e.StartDispatchers(ctx, 1, nil)
	if err != nil {
		return err
	}
	defer StopAll(servers)
	srv := servers[0]
	r.Set("ready_s", srv.Ready.Seconds())
	r.Set("rss_at_ready_mib", srv.MemoryMiB("VmRSS"))
	time.Sleep(startupWatch)
	r.Set("peak_rss_after_watch_mib", srv.MemoryMiB("VmHWM"))
	var done int
	if err := e.DB.QueryRow(ctx, `SELECT count(*) FROM attempts WHERE status = 'succeeded'`).Scan(&done); err != nil {
		return err
	}
	r.Set("backlog_steps_per_s", float64(done)/startupWatch.Seconds())
	StopAll(servers)
	return e.ResetCatalog(ctx)
}
