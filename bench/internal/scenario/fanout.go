package scenario

import (
	"context"
	"fmt"
	"time"

	"github.com/cairnrun/cairn/bench/internal/cairn"
	"github.com/cairnrun/cairn/bench/internal/report"
)

// Fanout runs one run of root → FanoutWidth parallel noops → join on one `cairn
// serve`, and measures from the catalog the time from the root's completion to the
// join's completion.
func Fanout(ctx context.Context, e *Env) *report.Result {
	r := e.NewResult("fanout")
	r.Settings["width"] = e.Scale.FanoutWidth
	r.Settings["workflow"] = fmt.Sprintf("root → %d parallel noop steps → join (noop), one run", e.Scale.FanoutWidth)
	r.Settings["server"] = "one `cairn serve` with its dispatcher (default settings)"
	r.Settings["measured"] = "join_s = join attempt finished_at − root attempt finished_at"
	err := fanout(ctx, e, r)
	r.AtMost("join_s", 1)
	r.Finish(err)
	return r
}

func fanout(ctx context.Context, e *Env, r *report.Result) error {
	if err := e.DeployFresh(ctx, cairn.FanoutBundle(e.Scale.FanoutWidth)); err != nil {
		return err
	}
	servers, err := e.StartDispatchers(ctx, 1, nil)
	if err != nil {
		return err
	}
	defer StopAll(servers)
	settleStats(ctx)
	if err := e.resetStatements(ctx); err != nil {
		return err
	}
	tablesBefore, err := e.tableStats(ctx)
	if err != nil {
		return err
	}
	e.Logf("fanout: 1 → %d → 1", e.Scale.FanoutWidth)
	run, err := cairn.NewClient(servers[0].URL).StartRun(ctx, cairn.WorkflowFanout)
	if err != nil {
		return err
	}
	if err := waitRun(ctx, e, run.ID, 5*time.Minute); err != nil {
		return err
	}
	var rootDone, lastPartDone, joinStart, joinDone time.Time
	err = e.DB.QueryRow(ctx, `
SELECT max(finished_at) FILTER (WHERE step_key = 'root'),
       max(finished_at) FILTER (WHERE step_key NOT IN ('root', 'join')),
       max(started_at) FILTER (WHERE step_key = 'join'),
       max(finished_at) FILTER (WHERE step_key = 'join')
FROM attempts WHERE run_id = $1 AND status = 'succeeded'`, run.ID).Scan(&rootDone, &lastPartDone, &joinStart, &joinDone)
	if err != nil {
		return err
	}
	steps := float64(e.Scale.FanoutWidth + 2)
	sqlp, err := e.sqlProfile(ctx, "step of the fan-out run", steps, 20)
	if err != nil {
		return err
	}
	StopAll(servers) // its backends flush their statistics as they exit
	tablesAfter, err := e.tableStats(ctx)
	if err != nil {
		return err
	}
	e.AddProfile("fanout", &FanoutProfile{SQL: sqlp, Tables: tableDelta(tablesBefore, tablesAfter)})
	r.Set("round_trips_per_step", sqlp.RoundTripsPer)
	r.Set("sql_exec_ms_per_step", sqlp.SQLExecMSPer)
	r.Set("join_s", joinDone.Sub(rootDone).Seconds())
	r.Set("parts_s", lastPartDone.Sub(rootDone).Seconds())
	r.Set("parts_per_s", float64(e.Scale.FanoutWidth)/lastPartDone.Sub(rootDone).Seconds())
	r.Set("last_part_to_join_start_ms", ms(joinStart.Sub(lastPartDone)))
	r.Set("join_attempt_ms", ms(joinDone.Sub(joinStart)))
	return nil
}

// FanoutProfile is where the fan-out run's time went.
type FanoutProfile struct {
	SQL    *SQLProfile  `json:"sql"`
	Tables []TableStats `json:"tables"`
}
