package scenario

import (
	"context"
	"fmt"
	"time"

	"github.com/cairnrun/cairn/bench/internal/cairn"
	"github.com/cairnrun/cairn/bench/internal/report"
)

// mapPage is the catalog's page of map instances (catalog.MapPageSize).
const mapPage = 1000

// mapLeaseTTL is the dispatchers' lease TTL: the killed one's instances wait that
// long (and a sweep) before the survivor runs them again.
const mapLeaseTTL = 3 * time.Second

// Map runs one run of a map over MapItems items (JSON Lines from an exec step,
// read as a stream) with max_parallel 200 on two dispatchers, SIGKILLs one of them
// a third of the way through the expansion, and measures items/s, the peak number
// of unfinished instance rows, the survivor's RSS, and from the catalog that every
// item has exactly one instance and ran once.
func Map(ctx context.Context, e *Env) *report.Result {
	r := e.NewResult("map")
	n := e.Scale.MapItems
	r.Settings["items"] = n
	r.Settings["workflow"] = fmt.Sprintf("exec `seq` printing %d JSON Lines → map (max_parallel %d) of noop built-ins → join", n, cairn.MapParallel)
	r.Settings["dispatchers"] = "2 `cairn serve` processes, CAIRN_LEASE_TTL=3s; one SIGKILLed when a third of the instances exist"
	r.Settings["measured"] = "items_per_s = items / (last instance finished_at − first instance started_at), the kill's stall included; items_per_s_before_kill = instances succeeded at the kill / time since the first started; peak_live_rows = most unfinished instance rows seen (sampled every 20 ms); rss = the survivor's VmRSS sampled every 100 ms; duplicates = items with more than one instance row or succeeded attempt; lost = items without a succeeded instance"
	err := mapScenario(ctx, e, r)
	r.AtMost("duplicates", 0)
	r.AtMost("lost", 0)
	r.AtMost("peak_live_rows", float64(cairn.MapParallel+mapPage))
	r.Finish(err)
	return r
}

func mapScenario(ctx context.Context, e *Env, r *report.Result) error {
	n := e.Scale.MapItems
	if err := e.DeployFresh(ctx, cairn.MapBundle(n)); err != nil {
		return err
	}
	servers, err := e.StartDispatchers(ctx, 2, func(c *cairn.ServerConfig) { c.LeaseTTL = mapLeaseTTL })
	if err != nil {
		return err
	}
	defer StopAll(servers)
	victim, survivor := servers[0], servers[1]
	rssStart := survivor.MemoryMiB("VmRSS")
	if _, err := e.CreateRuns(ctx, cairn.WorkflowMap, 1, 1); err != nil {
		return err
	}
	var peakLive, peakRSS float64
	killed, done := false, false
	var killedAt int64
	deadline := time.Now().Add(15 * time.Minute)
	for !done {
		var live, created int64
		var status string
		err := e.DB.QueryRow(ctx, `
SELECT (SELECT count(*) FROM steps WHERE map_parent IS NOT NULL AND status IN ('waiting', 'ready', 'running', 'suspended')),
       (SELECT coalesce(max(next_index), 0) FROM step_maps),
       (SELECT status FROM runs LIMIT 1)`).Scan(&live, &created, &status)
		if err != nil {
			return err
		}
		peakLive = max(peakLive, float64(live))
		peakRSS = max(peakRSS, survivor.MemoryMiB("VmRSS"))
		if !killed && created >= int64(n)/3 {
			var done int64
			var window float64
			if err := e.DB.QueryRow(ctx, `
SELECT count(*), coalesce(extract(epoch FROM now() - min(started_at)), 0)
FROM steps WHERE map_parent IS NOT NULL AND status = 'succeeded'`).Scan(&done, &window); err != nil {
				return err
			}
			if window > 0 {
				r.Set("items_per_s_before_kill", float64(done)/window)
			}
			e.Logf("map: SIGKILL of a dispatcher with %d of %d instances created", created, n)
			victim.Kill()
			killed, killedAt = true, created
		}
		switch status {
		case "succeeded":
			done = true
		case "failed", "canceled":
			return fmt.Errorf("the map run ended %s", status)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the map run is not done after 15 minutes: %d of %d instances created", created, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var rows, distinct, succeededItems, dupAttempts int64
	var window float64
	err = e.DB.QueryRow(ctx, `
SELECT count(*), count(DISTINCT map_index), count(*) FILTER (WHERE status = 'succeeded'),
       coalesce(extract(epoch FROM max(finished_at) - min(started_at)), 0)
FROM steps WHERE map_parent IS NOT NULL`).Scan(&rows, &distinct, &succeededItems, &window)
	if err != nil {
		return err
	}
	err = e.DB.QueryRow(ctx, `
SELECT count(*) FROM (SELECT 1 FROM attempts WHERE status = 'succeeded' AND step_key LIKE 'each[%'
                      GROUP BY run_id, step_key HAVING count(*) > 1) d`).Scan(&dupAttempts)
	if err != nil {
		return err
	}
	r.Set("items", float64(rows))
	if window > 0 {
		r.Set("items_per_s", float64(n)/window)
	}
	r.Set("map_s", window)
	r.Set("peak_live_rows", peakLive)
	r.Set("rss_start_mib", rssStart)
	r.Set("rss_peak_mib", peakRSS)
	r.Set("rss_end_mib", survivor.MemoryMiB("VmRSS"))
	r.Set("killed_at_instances", float64(killedAt))
	r.Set("duplicates", float64(rows-distinct+dupAttempts))
	r.Set("lost", float64(int64(n)-succeededItems))
	e.Logf("map: %d items in %.1f s (%.0f items/s), peak %v live rows, survivor RSS %.0f→%.0f MiB",
		n, window, float64(n)/window, peakLive, rssStart, peakRSS)
	return nil
}
