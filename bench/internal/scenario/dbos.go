package scenario

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"

	"github.com/cairnrun/cairn/bench/internal/cairn"
	"github.com/cairnrun/cairn/bench/internal/report"
)

// DBOSDB is the system database of DBOS Transact on the benchmark's server.
const DBOSDB = "dbos"

// dbosQueue is the name of the queue of the queued configurations.
const dbosQueue = "bench"

// dbosConfig is one way of running DBOS's chain.
type dbosConfig struct {
	name string
	// queued: every workflow is enqueued (dbos.WithQueue) before Launch starts
	// the queue runner, as Cairn's runs are all created before its dispatchers
	// start; else direct: concurrency goroutines each start a workflow with
	// dbos.RunWorkflow and wait for its result, then start the next.
	queued bool
	// concurrency: workflows in flight (direct), or the queue's worker
	// concurrency (queued).
	concurrency int
	// poll is the queue's base polling interval (queued only; DBOS's default
	// is 1 s, which caps a queue near its concurrency per second).
	poll time.Duration
}

// dbosConfigs are the configurations measured: direct starts and the queue, each
// with 64 and 128 workflows in flight. Of the polling intervals tried on a
// 2-core VM (1, 10 and 50 ms, and DBOS's 1 s default), 10 ms was the best:
// 1 ms spends the processor polling, 50 ms leaves workers idle
// (bench/README.md, "Peers").
var dbosConfigs = []dbosConfig{
	{name: "direct_c64", concurrency: 64},
	{name: "direct_c128", concurrency: 128},
	{name: "queued_c64_p10ms", queued: true, concurrency: 64, poll: 10 * time.Millisecond},
	{name: "queued_c128_p10ms", queued: true, concurrency: 128, poll: 10 * time.Millisecond},
}

// dbosRound is what one burn of the chain measured.
type dbosRound struct {
	StepsPerS, WallStepsPerS           float64
	CPUMSPerStep, PostgresCPUMSPerStep float64
	StatementsPerStep, CommitsPerStep  float64
	Steps                              int
}

// DBOS runs the same 10-step chain of no-op steps as the throughput scenario
// with DBOS Transact for Go (dbos.RunAsStep), over ThroughputRuns workflows, in
// each of dbosConfigs, on the same PostgreSQL as Cairn (database dbos). steps/s =
// steps / (last operation_outputs.completed_at_epoch_ms − first
// started_at_epoch_ms), from its system tables, as Cairn's steps/s is measured
// from the catalog. dbos_steps_per_s is its best configuration.
func DBOS(ctx context.Context, e *Env) *report.Result {
	r := e.NewResult("dbos")
	r.Settings["workflows"] = e.Scale.ThroughputRuns
	r.Settings["workflow"] = fmt.Sprintf("%d dbos.RunAsStep no-op steps in sequence, empty input and output", cairn.ChainSteps)
	r.Settings["pool"] = "DBOS's own pgxpool on database dbos (its default, MaxConns 20, River's size), as the superuser"
	r.Settings["configurations"] = "direct_cN: N goroutines, each starting a workflow with dbos.RunWorkflow and waiting for its result, then the next; queued_cN: every workflow enqueued first (dbos.WithQueue, before dbos.Launch starts the queue runner), worker concurrency N, base polling interval as named"
	for _, c := range dbosConfigs {
		r.Settings[c.name] = c.describe()
	}
	r.Settings["measured"] = "steps/s = operation_outputs rows / (max(completed_at_epoch_ms) − min(started_at_epoch_ms)); wall_ = steps / time from the first start (direct) or Launch (queued) to every workflow done; cpu_ms_per_step = processor time of the benchmark process (where DBOS runs) and the PostgreSQL cluster over that time, per step; statements_per_step = top-level statements on database dbos (pg_stat_statements), commits_per_step = its xact_commit, per step"
	err := runDBOS(ctx, e, r)
	r.Finish(err)
	return r
}

func (c dbosConfig) describe() string {
	if c.queued {
		return fmt.Sprintf("queued, worker concurrency %d, base polling interval %s", c.concurrency, c.poll)
	}
	return fmt.Sprintf("direct, %d workflows in flight", c.concurrency)
}

func runDBOS(ctx context.Context, e *Env, r *report.Result) error {
	if err := e.PG.CreateDatabase(ctx, DBOSDB); err != nil {
		return err
	}
	var best dbosConfig
	for _, c := range dbosConfigs {
		round, err := dbosBurn(ctx, e, c)
		if err != nil {
			return fmt.Errorf("dbos %s: %w", c.name, err)
		}
		r.Set("dbos_steps_per_s_"+c.name, round.StepsPerS)
		r.Set("dbos_wall_steps_per_s_"+c.name, round.WallStepsPerS)
		r.Set("dbos_cpu_ms_per_step_"+c.name, round.CPUMSPerStep)
		r.Set("dbos_postgres_cpu_ms_per_step_"+c.name, round.PostgresCPUMSPerStep)
		r.Set("dbos_statements_per_step_"+c.name, round.StatementsPerStep)
		r.Set("dbos_commits_per_step_"+c.name, round.CommitsPerStep)
		if round.StepsPerS > r.Metrics["dbos_steps_per_s"] {
			best = c
			r.Set("dbos_steps_per_s", round.StepsPerS)
			r.Set("dbos_cpu_ms_per_step", round.CPUMSPerStep)
		}
	}
	r.Settings["best"] = best.name
	return nil
}

// dbosAgain burns the chain once more in DBOS's best configuration of the dbos
// scenario (peer), after throughput's rounds, as riverAgain does for River.
func dbosAgain(ctx context.Context, e *Env, peer *report.Result) (dbosRound, error) {
	name, _ := peer.Settings["best"].(string)
	for _, c := range dbosConfigs {
		if c.name == name {
			e.Logf("dbos (%s, again after throughput's rounds)", c.name)
			return dbosBurn(ctx, e, c)
		}
	}
	return dbosRound{}, fmt.Errorf("dbos: no configuration %q", name)
}

// dbosChain is the workflow: cairn.ChainSteps no-op steps in sequence.
func dbosChain(ctx dbos.Context, _ string) (string, error) {
	for range cairn.ChainSteps {
		if _, err := dbos.RunAsStep(ctx, dbosNoop); err != nil {
			return "", err
		}
	}
	return "", nil
}

func dbosNoop(context.Context) (string, error) { return "", nil }

// dbosBurn runs ThroughputRuns workflows of the chain in configuration c, on an
// emptied system database, and measures them.
func dbosBurn(ctx context.Context, e *Env, c dbosConfig) (dbosRound, error) {
	var round dbosRound
	n := e.Scale.ThroughputRuns
	e.Logf("dbos (%s): %d workflows of %d steps", c.name, n, cairn.ChainSteps)
	sysDB, err := pgx.Connect(ctx, e.PG.URL(DBOSDB))
	if err != nil {
		return round, err
	}
	defer sysDB.Close(context.WithoutCancel(ctx))
	// The tables exist once a first context has launched (DBOS migrates its
	// schema at NewContext).
	if _, err := sysDB.Exec(ctx, `
DO $$ BEGIN
  IF to_regclass('dbos.workflow_status') IS NOT NULL THEN
    TRUNCATE dbos.workflow_status, dbos.operation_outputs CASCADE;
  END IF;
END $$`); err != nil {
		return round, fmt.Errorf("empty dbos tables: %w", err)
	}
	dctx, err := dbos.NewContext(ctx, dbos.Config{
		AppName:     "cairn-bench",
		DatabaseURL: e.PG.URL(DBOSDB),
		Logger:      discardLogger(),
	})
	if err != nil {
		return round, fmt.Errorf("new context: %w", err)
	}
	launched := false
	defer func() {
		if launched {
			dbos.Shutdown(dctx, 30*time.Second)
		}
	}()
	dbos.RegisterWorkflow(dctx, dbosChain, dbos.WithWorkflowName("bench_chain"))
	var queue dbos.Queue
	if c.queued {
		if queue, err = dbos.RegisterQueue(dctx, dbosQueue, dbos.WithWorkerConcurrency(c.concurrency),
			dbos.WithQueueBasePollingInterval(c.poll), dbos.WithQueueOnConflict(dbos.QueueConflictAlwaysUpdate)); err != nil {
			return round, fmt.Errorf("register queue: %w", err)
		}
		// All enqueued before the queue runner starts, as Cairn's runs are all
		// created before its dispatchers start.
		if err := dbosStart(ctx, createClients, n, func() error {
			// By name: dbos.RunWorkflow refuses to start before Launch.
			_, err := dbos.Enqueue[string](dctx, queue.GetName(), "bench_chain", "")
			return err
		}); err != nil {
			return round, fmt.Errorf("enqueue: %w", err)
		}
	}
	if _, err := sysDB.Exec(ctx, `CHECKPOINT`); err != nil {
		return round, err
	}
	stats0, err := e.dbosStats(ctx)
	if err != nil {
		return round, err
	}
	cpu0, pg0 := selfCPU(), e.PG.CPUSeconds()
	start := time.Now()
	if err := dbos.Launch(dctx); err != nil {
		return round, fmt.Errorf("launch: %w", err)
	}
	launched = true
	if !c.queued {
		err = dbosStart(ctx, c.concurrency, n, func() error {
			h, err := dbos.RunWorkflow(dctx, dbosChain, "")
			if err != nil {
				return err
			}
			_, err = h.GetResult()
			return err
		})
		if err != nil {
			return round, err
		}
	}
	deadline := start.Add(10 * time.Minute)
	for {
		var left int
		if err := sysDB.QueryRow(ctx, `SELECT count(*) FROM dbos.workflow_status WHERE status <> 'SUCCESS'`).Scan(&left); err != nil {
			return round, err
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			return round, fmt.Errorf("%d workflows unfinished after 10 minutes", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
	wall := time.Since(start)
	cpu, pgCPU := selfCPU()-cpu0, e.PG.CPUSeconds()-pg0
	dbos.Shutdown(dctx, 30*time.Second)
	launched = false
	var done int
	if err := sysDB.QueryRow(ctx, `SELECT count(*) FROM dbos.workflow_status WHERE status = 'SUCCESS'`).Scan(&done); err != nil {
		return round, err
	}
	if done != n {
		return round, fmt.Errorf("%d of %d workflows succeeded", done, n)
	}
	var span float64
	if err := sysDB.QueryRow(ctx, `
SELECT count(*), (max(completed_at_epoch_ms) - min(started_at_epoch_ms)) / 1000.0
FROM dbos.operation_outputs`).Scan(&round.Steps, &span); err != nil {
		return round, err
	}
	if round.Steps != n*cairn.ChainSteps {
		return round, fmt.Errorf("%d steps recorded, want %d", round.Steps, n*cairn.ChainSteps)
	}
	if err := waitBackendsGone(ctx, sysDB); err != nil {
		return round, err
	}
	stats1, err := e.dbosStats(ctx)
	if err != nil {
		return round, err
	}
	steps := float64(round.Steps)
	round.StepsPerS = steps / span
	round.WallStepsPerS = steps / wall.Seconds()
	round.CPUMSPerStep = (cpu + pgCPU) * 1000 / steps
	round.PostgresCPUMSPerStep = pgCPU * 1000 / steps
	round.StatementsPerStep = (stats1.statements - stats0.statements) / steps
	round.CommitsPerStep = (stats1.commits - stats0.commits) / steps
	e.Logf("dbos (%s): %.0f steps/s, %.2f ms of processor time per step", c.name, round.StepsPerS, round.CPUMSPerStep)
	return round, nil
}

// dbosStart calls start total times from workers goroutines.
func dbosStart(ctx context.Context, workers, total int, start func() error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Go(func() {
			for int(next.Add(1)) <= total && ctx.Err() == nil {
				if err := start(); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return ctx.Err()
}

// dbosCounters are database dbos's cumulative counters.
type dbosCounters struct{ statements, commits float64 }

// dbosStats reads the top-level statements (pg_stat_statements, whose view is
// in the catalog's database and counts every database's) and the commits of
// database dbos, the benchmark's own reads there included (a few a second).
func (e *Env) dbosStats(ctx context.Context) (dbosCounters, error) {
	var c dbosCounters
	err := e.DB.QueryRow(ctx, `
SELECT (SELECT coalesce(sum(calls), 0)::float8 FROM pg_stat_statements WHERE toplevel AND dbid = d.datid),
       d.xact_commit::float8
FROM pg_stat_database d WHERE d.datname = $1`, DBOSDB).Scan(&c.statements, &c.commits)
	if err != nil {
		return c, fmt.Errorf("read dbos counters: %w", err)
	}
	return c, nil
}

// waitBackendsGone waits until no connection but conn's is open on conn's
// database: DBOS's backends, closed by its Shutdown, flush their counters
// (xact_commit) as they exit.
func waitBackendsGone(ctx context.Context, conn *pgx.Conn) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d connections to the dbos database left 30 s after its Shutdown", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
