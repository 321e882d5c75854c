package scenario

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/cairnrun/cairn/bench/internal/cairn"
	"github.com/cairnrun/cairn/bench/internal/report"
)

// recoveryTTL is the lease TTL of the recovery scenario.
const recoveryTTL = 3 * time.Second

// Recovery starts RecoveryRuns one-step `sleep 2s` runs on two dispatchers
// (concurrency RecoveryRuns/2 each, so both hold half), SIGKILLs one once every step
// is running, and measures from the catalog how long until the survivor has taken
// over every orphaned step, and until every run is done.
func Recovery(ctx context.Context, e *Env) *report.Result {
	r := e.NewResult("recovery")
	n := e.Scale.RecoveryRuns
	r.Settings["runs"] = n
	r.Settings["workflow"] = "one `sleep` built-in step of " + cairn.SleepDuration + ", max_attempts 3"
	r.Settings["dispatchers"] = fmt.Sprintf("2 `cairn serve` processes, CAIRN_LEASE_TTL=%s (heartbeat every TTL/3, sweep every TTL/2 jittered), CAIRN_CONCURRENCY=%d", recoveryTTL, (n+1)/2)
	r.Settings["creation"] = "runs created through an API-only server before the dispatchers start; the kill comes once every step is running"
	r.Settings["measured"] = "recovery_s = last re-claim (attempt ≥ 2 started_at) − kill; all_done_s = last run finished_at − kill; first_ and last_swept_s = when the sweeper marked the orphaned attempts interrupted; duplicates = steps with more than one succeeded attempt"
	err := recovery(ctx, e, r)
	r.AtMost("recovery_s", (recoveryTTL + time.Second).Seconds())
	r.AtMost("duplicate_successes", 0)
	r.Finish(err)
	return r
}

func recovery(ctx context.Context, e *Env, r *report.Result) error {
	n := e.Scale.RecoveryRuns
	if err := e.DeployFresh(ctx, cairn.SleepBundle()); err != nil {
		return err
	}
	if _, err := e.CreateRuns(ctx, cairn.WorkflowSleep, n, createClients); err != nil {
		return err
	}
	servers, err := e.StartDispatchers(ctx, 2, func(c *cairn.ServerConfig) {
		c.LeaseTTL = recoveryTTL
		c.Concurrency = (n + 1) / 2
	})
	if err != nil {
		return err
	}
	defer StopAll(servers)
	victim, survivor := servers[0], servers[1]
	// Wait until every step is running (both dispatchers full).
	deadline := time.Now().Add(30 * time.Second)
	for {
		var running int
		if err := e.DB.QueryRow(ctx, `SELECT count(*) FROM steps WHERE status = 'running'`).Scan(&running); err != nil {
			return err
		}
		if running == n {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d steps running after 30 s", running, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The dispatcher id is host-pid-random: match the pid.
	owner := "%-" + strconv.Itoa(victim.Pid()) + "-%"
	var held int
	if err := e.DB.QueryRow(ctx, `SELECT count(*) FROM steps WHERE status = 'running' AND lease_owner LIKE $1`, owner).Scan(&held); err != nil {
		return err
	}
	e.Logf("recovery: SIGKILL of a dispatcher holding %d of %d running steps", held, n)
	killed := time.Now()
	victim.Kill()
	if err := e.WaitRunsDone(ctx, 2*time.Minute); err != nil {
		return err
	}
	metrics, err := survivor.Metrics(ctx)
	if err != nil {
		return err
	}
	var reclaimed, interrupted, duplicates, failed int
	var lastReclaim, lastDone, firstSwept, lastSwept time.Time
	err = e.DB.QueryRow(ctx, `
SELECT (SELECT count(*) FROM attempts WHERE number >= 2),
       (SELECT coalesce(max(started_at), now()) FROM attempts WHERE number >= 2),
       (SELECT count(*) FROM attempts WHERE status = 'interrupted'),
       (SELECT count(*) FROM (SELECT 1 FROM attempts WHERE status = 'succeeded'
                              GROUP BY run_id, step_key HAVING count(*) > 1) d),
       (SELECT count(*) FROM runs WHERE status <> 'succeeded'),
       (SELECT max(finished_at) FROM runs),
       (SELECT coalesce(min(finished_at), now()) FROM attempts WHERE status = 'interrupted'),
       (SELECT coalesce(max(finished_at), now()) FROM attempts WHERE status = 'interrupted')`).
		Scan(&reclaimed, &lastReclaim, &interrupted, &duplicates, &failed, &lastDone, &firstSwept, &lastSwept)
	if err != nil {
		return err
	}
	r.Set("steps_held_by_killed", float64(held))
	r.Set("steps_reclaimed", float64(reclaimed))
	r.Set("recovery_s", lastReclaim.Sub(killed).Seconds())
	r.Set("all_done_s", lastDone.Sub(killed).Seconds())
	r.Set("first_swept_s", firstSwept.Sub(killed).Seconds())
	r.Set("last_swept_s", lastSwept.Sub(killed).Seconds())
	r.Set("duplicate_successes", float64(duplicates))
	r.Set("interrupted_attempts", float64(interrupted))
	r.Set("lease_lost_survivor", metrics["cairn_lease_lost_total"])
	// The survivor's lease renewals, each one statement for its liveness and
	// every lease it holds (half the runs, then all of them), none waiting for a
	// row lock.
	if n := metrics["cairn_heartbeat_seconds_count"]; n > 0 {
		r.Set("heartbeat_mean_ms", 1000*metrics["cairn_heartbeat_seconds_sum"]/n)
	}
	r.Set("heartbeats_survivor", metrics["cairn_heartbeat_seconds_count"])
	r.Set("heartbeats_failed_survivor", metrics["cairn_heartbeats_failed_total"])
	r.Set("runs_not_succeeded", float64(failed))
	if reclaimed != held {
		return fmt.Errorf("%d steps re-claimed, but the killed dispatcher held %d", reclaimed, held)
	}
	return nil
}
