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
	r.AtMost("step_to_step_p50_ms", 2) // the goal, bench/README.md
	r.AtMost("step_to_step_p99_ms", 10)
	r.Finish(err)
	return r
}

func latency(ctx context.Context, e *Env, r *report.Result) error {
	if err := e.DeployFresh(ctx, cairn.ChainBundle()); err != nil {
		return err
	}
	l, err := measureLatency(ctx, e, e.Scale.LatencyRuns)
	if err != nil {
		return err
	}
	e.AddProfile("latency, one run at a time", l.SQL)
	r.Set("round_trips_per_step", l.SQL.RoundTripsPer)
	r.Set("sql_exec_ms_per_step", l.SQL.SQLExecMSPer)
	r.Set("step_to_step_p50_ms", report.Percentile(l.Gaps, 50))
	r.Set("step_to_step_p99_ms", report.Percentile(l.Gaps, 99))
	r.Set("step_to_step_max_ms", report.Percentile(l.Gaps, 100))
	r.Set("start_to_first_step_p50_ms", report.Percentile(l.Firsts, 50))
	r.Set("start_to_first_step_p99_ms", report.Percentile(l.Firsts, 99))
	r.Set("sent_to_first_step_p50_ms", report.Percentile(l.FirstsSent, 50))
	r.Set("sent_to_first_step_p99_ms", report.Percentile(l.FirstsSent, 99))
	r.Set("created_to_first_step_p50_ms", report.Percentile(l.FirstsDB, 50))
	r.Set("created_to_first_step_p99_ms", report.Percentile(l.FirstsDB, 99))
	r.Set("run_p50_ms", report.Percentile(l.Runs, 50))
	r.Set("run_p99_ms", report.Percentile(l.Runs, 99))
	r.Settings["samples_step_to_step"] = len(l.Gaps)
	return nil
}

// latencySamples are what measureLatency saw, in milliseconds.
type latencySamples struct {
	// Gaps are the step-to-step times; Firsts, FirstsSent and FirstsDB the first
	// step's start from the POST's return, from its sending and from the run's
	// created_at; Runs each run's time from the POST's return to its end (as polled).
	Gaps, Firsts, FirstsSent, FirstsDB, Runs []float64
	// SQL is pg_stat_statements over the measurement, per step.
	SQL *SQLProfile
}

// measureLatency runs n chain runs one at a time on one fresh `cairn serve` (API
// and dispatcher) over the catalog as it is (the chain deployed), and reads their
// timings from the catalog. latency and growth measure with it.
func measureLatency(ctx context.Context, e *Env, n int) (*latencySamples, error) {
	servers, err := e.StartDispatchers(ctx, 1, nil)
	if err != nil {
		return nil, err
	}
	defer StopAll(servers)
	client := cairn.NewClient(servers[0].URL)
	defer client.Close()
	if err := e.resetStatements(ctx); err != nil {
		return nil, err
	}
	e.Logf("latency: %d runs one at a time", n)
	l := &latencySamples{}
	for i := 0; i < n; i++ {
		sent := time.Now()
		run, err := client.StartRun(ctx, cairn.WorkflowChain)
		if err != nil {
			return nil, err
		}
		posted := time.Now()
		if err := waitRun(ctx, e, run.ID, time.Minute); err != nil {
			return nil, err
		}
		l.Runs = append(l.Runs, ms(time.Since(posted)))
		rows, err := e.DB.Query(ctx, `
SELECT a.started_at, a.finished_at, r.created_at
FROM attempts a JOIN runs r ON r.id = a.run_id
WHERE a.run_id = $1 AND a.status = 'succeeded' ORDER BY a.step_key`, run.ID)
		if err != nil {
			return nil, err
		}
		var prevFinished time.Time
		k := 0
		for rows.Next() {
			var started, finished, created time.Time
			if err := rows.Scan(&started, &finished, &created); err != nil {
				rows.Close()
				return nil, err
			}
			if k == 0 {
				l.Firsts = append(l.Firsts, ms(started.Sub(posted)))
				l.FirstsSent = append(l.FirstsSent, ms(started.Sub(sent)))
				l.FirstsDB = append(l.FirstsDB, ms(started.Sub(created)))
			} else {
				l.Gaps = append(l.Gaps, ms(started.Sub(prevFinished)))
			}
			prevFinished = finished
			k++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		if k != cairn.ChainSteps {
			return nil, fmt.Errorf("run %s: %d succeeded attempts, want %d", run.ID, k, cairn.ChainSteps)
		}
	}
	steps := float64(n * cairn.ChainSteps)
	if l.SQL, err = e.sqlProfile(ctx, "step, one run at a time (its creation through the API included)", steps, 15); err != nil {
		return nil, err
	}
	return l, nil
}

// waitRunQuery is waitRun's poll (catalogStatements leaves it out).
const waitRunQuery = `SELECT status FROM runs WHERE id = $1`

// waitRun polls the catalog until the run is terminal: every 2 ms at first, backing
// off to 20 ms, so that a long run is not measured under a storm of polls.
func waitRun(ctx context.Context, e *Env, id string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	wait := 2 * time.Millisecond
	for {
		var status string
		if err := e.DB.QueryRow(ctx, waitRunQuery, id).Scan(&status); err != nil {
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
