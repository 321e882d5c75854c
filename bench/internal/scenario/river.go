package scenario

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/cairnrun/cairn/bench/internal/proc"
	"github.com/cairnrun/cairn/bench/internal/report"
)

// RiverDB is River's database on the benchmark's server.
const RiverDB = "river"

// riverInsertBatch is how many jobs one InsertMany call inserts.
const riverInsertBatch = 1000

// riverPoolConns bounds River's pgx pool in both configurations.
const riverPoolConns = 20

type noopArgs struct{}

func (noopArgs) Kind() string { return "bench_noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

// riverConfig is one River configuration under test.
type riverConfig struct {
	name              string
	fetchCooldown     time.Duration // 0: River's default
	fetchPollInterval time.Duration // 0: River's default
	maxWorkers        int
}

// riverBest is River at its best on this machine (its figure is river_jobs_per_s).
var riverBest = riverConfig{name: "best", fetchCooldown: time.Millisecond, fetchPollInterval: 5 * time.Millisecond, maxWorkers: 200}

// River burns down RiverJobs no-op jobs, inserted beforehand with InsertMany, once
// with River's defaults and once at its best settings, on the same PostgreSQL as
// Cairn (database river). jobs/s = jobs / (last finalized_at − first attempted_at),
// from the job table, as Cairn's steps/s is measured from the catalog.
func River(ctx context.Context, e *Env) *report.Result {
	r := e.NewResult("river")
	configs := []riverConfig{{name: "default", maxWorkers: 100}, riverBest}
	r.Settings["jobs"] = e.Scale.RiverJobs
	r.Settings["insert"] = fmt.Sprintf("InsertMany in batches of %d, all before the client starts", riverInsertBatch)
	r.Settings["pool"] = fmt.Sprintf("pgxpool, MaxConns %d", riverPoolConns)
	r.Settings["default"] = "River's defaults (FetchCooldown 100ms, FetchPollInterval 1s), MaxWorkers 100"
	r.Settings["best"] = "FetchCooldown 1ms, FetchPollInterval 5ms, MaxWorkers 200"
	r.Settings["measured"] = "jobs / (max(finalized_at) − min(attempted_at)) over the job table; wall_ = from Start to the poll seeing every job completed; cpu_ms_per_job = processor time of the benchmark process (River's client) and the PostgreSQL cluster from Start to the last job, per job"
	err := runRiver(ctx, e, r, configs)
	r.Finish(err)
	return r
}

func runRiver(ctx context.Context, e *Env, r *report.Result, configs []riverConfig) error {
	if err := e.PG.CreateDatabase(ctx, RiverDB); err != nil {
		return err
	}
	pool, err := riverPool(ctx, e)
	if err != nil {
		return err
	}
	defer pool.Close()
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river migrate: %w", err)
	}
	for _, c := range configs {
		e.Logf("river (%s): %d jobs", c.name, e.Scale.RiverJobs)
		perS, wall, cpu, err := riverBurn(ctx, e, pool, c)
		if err != nil {
			return fmt.Errorf("river %s: %w", c.name, err)
		}
		r.Set("river_jobs_per_s_"+c.name, perS)
		r.Set("river_wall_jobs_per_s_"+c.name, wall)
		r.Set("river_cpu_ms_per_job_"+c.name, cpu)
	}
	r.Metrics["river_jobs_per_s"] = r.Metrics["river_jobs_per_s_best"]
	r.Metrics["river_cpu_ms_per_job"] = r.Metrics["river_cpu_ms_per_job_best"]
	return nil
}

// riverPool is River's pool on its database.
func riverPool(ctx context.Context, e *Env) (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(e.PG.URL(RiverDB))
	if err != nil {
		return nil, err
	}
	pcfg.MaxConns = riverPoolConns
	return pgxpool.NewWithConfig(ctx, pcfg)
}

// riverAgain burns RiverJobs jobs once more at River's best, on the database the
// river scenario made: throughput measures it after its own rounds, so that its
// ratio to River is of two figures centred on the same moment (the river
// scenario's before them, this one after), not of the VM's speed at two moments
// minutes apart.
func riverAgain(ctx context.Context, e *Env) (perS, cpuMSPerJob float64, err error) {
	pool, err := riverPool(ctx, e)
	if err != nil {
		return 0, 0, err
	}
	defer pool.Close()
	e.Logf("river (%s, again after throughput's rounds): %d jobs", riverBest.name, e.Scale.RiverJobs)
	perS, _, cpuMSPerJob, err = riverBurn(ctx, e, pool, riverBest)
	if err != nil {
		return 0, 0, fmt.Errorf("river %s again: %w", riverBest.name, err)
	}
	return perS, cpuMSPerJob, nil
}

// riverBurn returns jobs/s from the job table, jobs/s by the wall clock, and the
// processor time per job (this process, where River runs, plus PostgreSQL).
func riverBurn(ctx context.Context, e *Env, pool *pgxpool.Pool, c riverConfig) (perS, wallPerS, cpuMSPerJob float64, err error) {
	if _, err := pool.Exec(ctx, `TRUNCATE river_job`); err != nil {
		return 0, 0, 0, err
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, noopWorker{})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		FetchCooldown:     c.fetchCooldown,
		FetchPollInterval: c.fetchPollInterval,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: c.maxWorkers}},
		Workers:           workers,
		Logger:            discardLogger(),
	})
	if err != nil {
		return 0, 0, 0, err
	}
	n := e.Scale.RiverJobs
	params := make([]river.InsertManyParams, 0, riverInsertBatch)
	for done := 0; done < n; {
		params = params[:0]
		for i := 0; i < riverInsertBatch && done < n; i++ {
			params = append(params, river.InsertManyParams{Args: noopArgs{}})
			done++
		}
		if _, err := client.InsertMany(ctx, params); err != nil {
			return 0, 0, 0, fmt.Errorf("insert: %w", err)
		}
	}
	if _, err := pool.Exec(ctx, `CHECKPOINT`); err != nil {
		return 0, 0, 0, err
	}
	cpu0 := selfCPU() + e.PG.CPUSeconds()
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return 0, 0, 0, err
	}
	deadline := start.Add(10 * time.Minute)
	var wall time.Duration
	for {
		var left int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state <> 'completed'`).Scan(&left); err != nil {
			return 0, 0, 0, err
		}
		if left == 0 {
			wall = time.Since(start)
			cpuMSPerJob = (selfCPU() + e.PG.CPUSeconds() - cpu0) * 1000 / float64(n)
			break
		}
		if time.Now().After(deadline) {
			return 0, 0, 0, fmt.Errorf("%d jobs left after 10 minutes", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil && !errors.Is(err, context.Canceled) {
		return 0, 0, 0, fmt.Errorf("stop: %w", err)
	}
	var jobs int
	var span float64
	err = pool.QueryRow(ctx, `
SELECT count(*), extract(epoch FROM max(finalized_at) - min(attempted_at))::float8
FROM river_job WHERE state = 'completed'`).Scan(&jobs, &span)
	if err != nil {
		return 0, 0, 0, err
	}
	return float64(jobs) / span, float64(jobs) / wall.Seconds(), cpuMSPerJob, nil
}

// selfCPU returns the processor seconds this process has used.
func selfCPU() float64 {
	c, _ := proc.ProcessCPU(os.Getpid())
	return c.Self
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
