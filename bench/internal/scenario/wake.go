package scenario

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnrun/cairn/bench/internal/cairn"
	"github.com/cairnrun/cairn/bench/internal/report"
)

// wakeConcurrency is CAIRN_CONCURRENCY of the wake scenario's dispatcher: far fewer
// slots than sleeping runs, which must hold none.
const wakeConcurrency = 4

// Wake creates WakeRuns runs of one durable `sleep: 5s` step, then starts one
// dispatcher with CAIRN_CONCURRENCY=4 while other runs (one noop step) keep being
// created; it measures from the catalog how late each sleep woke (step finished_at
// − wait_until) and how the other runs flowed meanwhile.
func Wake(ctx context.Context, e *Env) *report.Result {
	r := e.NewResult("wake")
	n := e.Scale.WakeRuns
	r.Settings["runs"] = n
	r.Settings["workflow"] = "one `sleep: " + cairn.WakeSleep + "` step (durable: suspended, no slot held)"
	r.Settings["dispatchers"] = fmt.Sprintf("1 `cairn serve`, CAIRN_CONCURRENCY=%d", wakeConcurrency)
	r.Settings["other_work"] = "2 API clients creating one-step noop runs back to back (open loop: faster than 4 slots run them, so their latency includes a growing queue) from the dispatcher's start until every sleep has woken"
	r.Settings["measured"] = "wake_lag = nap finished_at − wait_until per run (p50, p99, max); suspend_s = last waiting_since − dispatcher start; other_runs_per_s = other runs finished / their window; other run latency = finished_at − created_at"
	err := wake(ctx, e, r)
	r.AtMost("wake_lag_p99_ms", 1000)
	r.AtMost("sleeps_not_woken", 0)
	r.Finish(err)
	return r
}

func wake(ctx context.Context, e *Env, r *report.Result) error {
	n := e.Scale.WakeRuns
	if err := e.DeployFresh(ctx, cairn.WakeBundle()); err != nil {
		return err
	}
	if _, err := e.Client.Deploy(ctx, cairn.OneBundle()); err != nil {
		return err
	}
	if _, err := e.CreateRuns(ctx, cairn.WorkflowWake, n, createClients); err != nil {
		return err
	}
	started := time.Now()
	servers, err := e.StartDispatchers(ctx, 1, func(c *cairn.ServerConfig) { c.Concurrency = wakeConcurrency })
	if err != nil {
		return err
	}
	defer StopAll(servers)

	// Other work flows while the sleepers suspend and wake.
	flowCtx, stopFlow := context.WithCancel(ctx)
	var others atomic.Int64
	var flowErr error
	var flowOnce sync.Once
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for flowCtx.Err() == nil {
				if _, err := e.Client.StartRun(flowCtx, cairn.WorkflowOne); err != nil {
					if flowCtx.Err() == nil {
						flowOnce.Do(func() { flowErr = err })
					}
					return
				}
				others.Add(1)
			}
		})
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var left int
		if err := e.DB.QueryRow(ctx, `SELECT count(*) FROM runs WHERE workflow = $1 AND status IN ('pending', 'running')`,
			cairn.WorkflowWake).Scan(&left); err != nil {
			stopFlow()
			wg.Wait()
			return err
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			stopFlow()
			wg.Wait()
			return fmt.Errorf("%d sleeping runs not done after 5 minutes", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
	stopFlow()
	wg.Wait()
	if flowErr != nil {
		return fmt.Errorf("other runs: %w", flowErr)
	}
	if err := e.WaitRunsDone(ctx, 2*time.Minute); err != nil {
		return err
	}

	var p50, p99, maxLag, early float64
	var notWoken int
	var lastSuspend time.Time
	err = e.DB.QueryRow(ctx, `
SELECT coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY lag), 0),
       coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY lag), 0),
       coalesce(max(lag), 0),
       count(*) FILTER (WHERE lag < 0),
       (SELECT count(*) FROM runs WHERE workflow = $1 AND status <> 'succeeded'),
       (SELECT max(waiting_since) FROM steps s JOIN runs r ON r.id = s.run_id WHERE r.workflow = $1)
FROM (SELECT extract(epoch FROM s.finished_at - s.wait_until) * 1000 AS lag
      FROM steps s JOIN runs r ON r.id = s.run_id WHERE r.workflow = $1) l`, cairn.WorkflowWake).
		Scan(&p50, &p99, &maxLag, &early, &notWoken, &lastSuspend)
	if err != nil {
		return err
	}
	var otherDone int
	var otherWindow, otherP50, otherP99 float64
	err = e.DB.QueryRow(ctx, `
SELECT count(*), coalesce(extract(epoch FROM max(finished_at) - min(created_at)), 0),
       coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - created_at) * 1000), 0),
       coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - created_at) * 1000), 0)
FROM runs WHERE workflow = $1 AND status = 'succeeded'`, cairn.WorkflowOne).Scan(&otherDone, &otherWindow, &otherP50, &otherP99)
	if err != nil {
		return err
	}
	r.Set("wake_lag_p50_ms", p50)
	r.Set("wake_lag_p99_ms", p99)
	r.Set("wake_lag_max_ms", maxLag)
	r.Set("woken_early", early)
	r.Set("sleeps_not_woken", float64(notWoken))
	r.Set("suspend_s", lastSuspend.Sub(started).Seconds())
	r.Set("other_runs", float64(otherDone))
	if otherWindow > 0 {
		r.Set("other_runs_per_s", float64(otherDone)/otherWindow)
	}
	r.Set("other_run_p50_ms", otherP50)
	r.Set("other_run_p99_ms", otherP99)
	e.Logf("wake: %d sleeps woke with lag p50 %.0f ms, p99 %.0f ms; %d other runs meanwhile", n, p50, p99, otherDone)
	if early > 0 {
		return fmt.Errorf("%.0f sleeps woke before their time", early)
	}
	return nil
}
