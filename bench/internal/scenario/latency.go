package scenario

import (
	"context"
	"fmt"
	"time"

	"github.com/cairnrun/cairn/bench/internal/cairn"
	"github.com/cairnrun/cairn/bench/internal/report"
)

// Latency runs LatencyRuns 10-step noop chains one at a time on one `cairn serve`
// (API and dispatcher in one process), so nothing queues. From the catalog:
// step-to-step = the next step's attempt started_at − the previous attempt's
// finished_at; start-to-first-step = the first attempt's started_at − the moment
// the POST returned (the client's clock; same machine, same clock). It is negative
// when the dispatcher, woken by NOTIFY at the commit, starts the step before the
// 202 reaches the client; sent-to-first-step counts from the moment the POST was
// sent, created-to-first-step from the run's created_at (the start of the creating
// transaction).
func Latency(ctx context.Context, e *Env) *report.Result {
	r := e.NewResult("latency")
	r.Settings["runs"] = e.Scale.LatencyRuns
	r.Settings["workflow"] = fmt.Sprintf("%d noop built-in steps in a chain, one run at a time", cairn.ChainSteps)
	r.Settings["server"] = "one `cairn serve` with its dispatcher (default settings); the run is started through its API"
	r.Settings["timestamps"] = "PostgreSQL's now() is the start of the writing transaction: finished_at is when the completing transaction began, started_at when the claiming one began"
	err := latency(ctx, e, r)
	r.AtMost("step_to_step_p50_ms", 5)
	r.AtMost("step_to_step_p99_ms", 25)
	r.Finish(err)
	return r
}

func latency(ctx context.Context, e *Env, r *report.Result) error {
	if err := e.DeployFresh(ctx, cairn.ChainBundle()); err != nil {
		return err
	}
	servers, err := e.StartDispatchers(ctx, 1, nil)
	if err != nil {
		return err
	}
	defer StopAll(servers)
	client := cairn.NewClient(servers[0].URL)
	defer client.Close()
	if err := e.resetStatements(ctx); err != nil {
		return err
	}
	e.Logf("latency: %d runs one at a time", e.Scale.LatencyRuns)
	var gaps, firsts, firstsSent, firstsDB, runs []float64
	for i := 0; i < e.Scale.LatencyRuns; i++ {
		sent := time.Now()
		run, err := client.StartRun(ctx, cairn.WorkflowChain)
		if err != nil {
			return err
		}
		posted := time.Now()
		if err := waitRun(ctx, e, run.ID, time.Minute); err != nil {
			return err
		}
		runs = append(runs, ms(time.Since(posted)))
		rows, err := e.DB.Query(ctx, `
SELECT a.started_at, a.finished_at, r.created_at
FROM attempts a JOIN runs r ON r.id = a.run_id
WHERE a.run_id = $1 AND a.status = 'succeeded' ORDER BY a.step_key`, run.ID)
		if err != nil {
			return err
		}
		var prevFinished time.Time
		n := 0
		for rows.Next() {
			var started, finished, created time.Time
			if err := rows.Scan(&started, &finished, &created); err != nil {
				rows.Close()
				return err
			}
			if n == 0 {
				firsts = append(firsts, ms(started.Sub(posted)))
				firstsSent = append(firstsSent, ms(started.Sub(sent)))
				firstsDB = append(firstsDB, ms(started.Sub(created)))
			} else {
				gaps = append(gaps, ms(started.Sub(prevFinished)))
			}
			prevFinished = finished
			n++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if n != cairn.ChainSteps {
			return fmt.Errorf("run %s: %d succeeded attempts, want %d", run.ID, n, cairn.ChainSteps)
		}
	}
	steps := float64(e.Scale.LatencyRuns * cairn.ChainSteps)
	sqlp, err := e.sqlProfile(ctx, "step, one run at a time (its creation through the API included)", steps, 15)
	if err != nil {
		return err
	}
	e.AddProfile("latency, one run at a time", sqlp)
	r.Set("round_trips_per_step", sqlp.RoundTripsPer)
	r.Set("sql_exec_ms_per_step", sqlp.SQLExecMSPer)
	r.Set("step_to_step_p50_ms", report.Percentile(gaps, 50))
	r.Set("step_to_step_p99_ms", report.Percentile(gaps, 99))
	r.Set("step_to_step_max_ms", report.Percentile(gaps, 100))
	r.Set("start_to_first_step_p50_ms", report.Percentile(firsts, 50))
	r.Set("start_to_first_step_p99_ms", report.Percentile(firsts, 99))
	r.Set("sent_to_first_step_p50_ms", report.Percentile(firstsSent, 50))
	r.Set("sent_to_first_step_p99_ms", report.Percentile(firstsSent, 99))
	r.Set("created_to_first_step_p50_ms", report.Percentile(firstsDB, 50))
	r.Set("created_to_first_step_p99_ms", report.Percentile(firstsDB, 99))
	r.Set("run_p50_ms", report.Percentile(runs, 50))
	r.Set("run_p99_ms", report.Percentile(runs, 99))
	r.Settings["samples_step_to_step"] = len(gaps)
	return nil
}

// waitRun polls the catalog until the run is terminal: every 2 ms at first, backing
// off to 20 ms, so that a long run is not measured under a storm of polls.
func waitRun(ctx context.Context, e *Env, id string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	wait := 2 * time.Millisecond
	for {
		var status string
		if err := e.DB.QueryRow(ctx, `SELECT status FROM runs WHERE id = $1`, id).Scan(&status); err != nil {
			return err
		}
		switch status {
		case "succeeded":
			return nil
		case "failed", "canceled":
			return fmt.Errorf("run %s %s", id, status)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("run %s still %s after %s", id, status, timeout)
		}
		time.Sleep(wait)
		wait = min(wait*2, 20*time.Millisecond)
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
