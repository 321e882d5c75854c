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

// API measures create-run (POST /v1/workflows/{name}/runs) and get-run (GET
// /v1/runs/{id}) latency on the client, over loopback HTTP with keep-alive, on an
// API-only server (no dispatcher competes for the CPU): serially, then with
// APIClients concurrent clients.
func API(ctx context.Context, e *Env) *report.Result {
	r := e.NewResult("api")
	n := e.Scale.APIRequests
	r.Settings["server"] = "`cairn serve --no-dispatcher` (API only), default settings"
	r.Settings["workflow"] = fmt.Sprintf("create-run starts the %d-step chain: one transaction inserting the run, %d steps, an event", cairn.ChainSteps, cairn.ChainSteps)
	r.Settings["serial"] = fmt.Sprintf("%d creates, then %d gets of those runs, one client", n, n)
	r.Settings["concurrent"] = fmt.Sprintf("%d clients, %d creates then %d gets in all", e.Scale.APIClients, 4*n, 4*n)
	r.Settings["client"] = "Go net/http, keep-alive, bearer token; latency is from request to body read"
	err := apiLatency(ctx, e, r)
	r.AtMost("create_run_p50_ms", 1)
	r.AtMost("get_run_p50_ms", 0.3)
	r.Finish(err)
	return r
}

func apiLatency(ctx context.Context, e *Env, r *report.Result) error {
	if err := e.DeployFresh(ctx, cairn.ChainBundle()); err != nil {
		return err
	}
	defer func() { _ = e.ResetCatalog(context.WithoutCancel(ctx)) }()
	n := e.Scale.APIRequests
	for _, m := range []struct {
		suffix  string
		clients int
		total   int
	}{{"", 1, n}, {"_c" + fmt.Sprint(e.Scale.APIClients), e.Scale.APIClients, 4 * n}} {
		a, err := measureAPI(ctx, e, m.clients, m.total)
		if err != nil {
			return err
		}
		e.AddProfile(fmt.Sprintf("api create-run, %d client(s)", m.clients), a.CreateSQL)
		e.AddProfile(fmt.Sprintf("api get-run, %d client(s)", m.clients), a.GetSQL)
		r.Set("round_trips_per_create"+m.suffix, a.CreateSQL.RoundTripsPer)
		r.Set("sql_exec_ms_per_create"+m.suffix, a.CreateSQL.SQLExecMSPer)
		r.Set("round_trips_per_get"+m.suffix, a.GetSQL.RoundTripsPer)
		r.Set("create_run_p50_ms"+m.suffix, report.Percentile(a.Create, 50))
		r.Set("create_run_p99_ms"+m.suffix, report.Percentile(a.Create, 99))
		r.Set("create_run_per_s"+m.suffix, float64(m.total)/a.CreateWall.Seconds())
		r.Set("get_run_p50_ms"+m.suffix, report.Percentile(a.Get, 50))
		r.Set("get_run_p99_ms"+m.suffix, report.Percentile(a.Get, 99))
		r.Set("get_run_per_s"+m.suffix, float64(m.total)/a.GetWall.Seconds())
	}
	return nil
}

// apiSamples are what measureAPI saw: each request's latency in milliseconds, the
// wall time of each half, and pg_stat_statements per request.
type apiSamples struct {
	Create, Get         []float64
	CreateWall, GetWall time.Duration
	CreateSQL, GetSQL   *SQLProfile
}

// measureAPI creates total runs of the chain through the API-only server from
// clients concurrent clients, then gets each of them. api and growth measure with
// it.
func measureAPI(ctx context.Context, e *Env, clients, total int) (*apiSamples, error) {
	e.Logf("api: %d creates and gets, %d client(s)", total, clients)
	a := &apiSamples{}
	client := cairn.NewClient(e.API.URL)
	defer client.Close()
	ids := make([]string, total)
	if err := e.resetStatements(ctx); err != nil {
		return nil, err
	}
	var err error
	a.Create, a.CreateWall, err = hammer(ctx, clients, total, func(i int) error {
		run, err := client.StartRun(ctx, cairn.WorkflowChain)
		ids[i] = run.ID
		return err
	})
	if err != nil {
		return nil, err
	}
	if a.CreateSQL, err = e.sqlProfile(ctx, "create-run", float64(total), 10); err != nil {
		return nil, err
	}
	if err := e.resetStatements(ctx); err != nil {
		return nil, err
	}
	a.Get, a.GetWall, err = hammer(ctx, clients, total, func(i int) error {
		_, err := client.GetRun(ctx, ids[i])
		return err
	})
	if err != nil {
		return nil, err
	}
	if a.GetSQL, err = e.sqlProfile(ctx, "get-run", float64(total), 10); err != nil {
		return nil, err
	}
	return a, nil
}

// hammer calls op(0..total-1) from clients goroutines and returns each call's
// latency in milliseconds and the wall time.
func hammer(ctx context.Context, clients, total int, op func(i int) error) ([]float64, time.Duration, error) {
	lat := make([]float64, total)
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	start := time.Now()
	for c := 0; c < clients; c++ {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= total || ctx.Err() != nil {
					return
				}
				t := time.Now()
				if err := op(i); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				lat[i] = ms(time.Since(t))
			}
		})
	}
	wg.Wait()
	return lat, time.Since(start), firstErr
}
