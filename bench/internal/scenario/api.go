package scenario

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnrun/cairn/bench/internal/cairn"
	"github.com/cairnrun/cairn/bench/internal/report"
)

// API measures create-run (POST /v1/workflows/{name}/runs) and get-run (GET
// /v1/runs/{id}) latency on the client, over loopback HTTP with keep-alive, on an
// API-only server (no dispatcher competes for the CPU): serially, then with
// APIClients concurrent clients. Each is measured in rounds alternated with the
// floor server (ServeAPIFloor: the same statements behind a bare net/http
// server), in the order Cairn, floor, floor, Cairn, so that the ratio to the
// floor compares figures centred on the same moment.
func API(ctx context.Context, e *Env) *report.Result {
	r := e.NewResult("api")
	n := e.Scale.APIRequests
	r.Settings["server"] = "`cairn serve --no-dispatcher` (API only), default settings"
	r.Settings["floor"] = "a net/http server in a process of its own (the bench binary, " + APIFloorCommand + ") answering the same two routes through Cairn's catalog package (Store.RunGet, Store.RunCreate: the same statements, prepared, on lib/pq, as Cairn's role), with no authentication, middleware or validation; floor_* are its figures and *_ratio_to_floor Cairn's ÷ the floor's"
	r.Settings["rounds"] = "each measurement in 4 rounds, Cairn, floor, floor, Cairn; each side's percentiles are over the samples of its two rounds"
	r.Settings["workflow"] = fmt.Sprintf("create-run starts the %d-step chain: one transaction inserting the run, %d steps, an event", cairn.ChainSteps, cairn.ChainSteps)
	r.Settings["serial"] = fmt.Sprintf("%d creates, then %d gets of those runs, one client, per round", n, n)
	r.Settings["concurrent"] = fmt.Sprintf("%d clients, %d creates then %d gets in all, per round", e.Scale.APIClients, 4*n, 4*n)
	r.Settings["client"] = "Go net/http, keep-alive, bearer token; latency is from request to body read"
	r.Settings["cpu"] = "cpu_ms_per_create and cpu_ms_per_get: processor time of the server process (Cairn's or the floor's) per request, PostgreSQL not included"
	err := apiLatency(ctx, e, r)
	r.AtMost("get_run_p50_ratio_to_floor", 1.2)
	r.AtMost("create_run_p50_ratio_to_floor", 1.3)
	r.Finish(err)
	return r
}

func apiLatency(ctx context.Context, e *Env, r *report.Result) error {
	if err := e.DeployFresh(ctx, cairn.ChainBundle()); err != nil {
		return err
	}
	defer func() { _ = e.ResetCatalog(context.WithoutCancel(ctx)) }()
	floor, err := e.startAPIFloor(ctx)
	if err != nil {
		return err
	}
	defer floor.Stop()
	cairnAt := apiTarget{URL: e.API.URL, CPUSeconds: e.API.CPUSeconds}
	floorAt := apiTarget{URL: floor.URL, CPUSeconds: floor.CPUSeconds}
	n := e.Scale.APIRequests
	for _, m := range []struct {
		suffix  string
		clients int
		total   int
	}{{"", 1, n}, {"_c" + fmt.Sprint(e.Scale.APIClients), e.Scale.APIClients, 4 * n}} {
		var ours, floors []*apiSamples
		for _, t := range []apiTarget{cairnAt, floorAt, floorAt, cairnAt} {
			a, err := measureAPIAt(ctx, e, t, m.clients, m.total)
			if err != nil {
				return err
			}
			if t.URL == floor.URL {
				floors = append(floors, a)
			} else {
				ours = append(ours, a)
			}
		}
		a, f := mergeSamples(ours), mergeSamples(floors)
		e.AddProfile(fmt.Sprintf("api create-run, %d client(s)", m.clients), a.CreateSQL)
		e.AddProfile(fmt.Sprintf("api get-run, %d client(s)", m.clients), a.GetSQL)
		r.Set("round_trips_per_create"+m.suffix, a.CreateSQL.RoundTripsPer)
		r.Set("sql_exec_ms_per_create"+m.suffix, a.CreateSQL.SQLExecMSPer)
		r.Set("round_trips_per_get"+m.suffix, a.GetSQL.RoundTripsPer)
		r.Set("floor_round_trips_per_create"+m.suffix, f.CreateSQL.RoundTripsPer)
		r.Set("floor_round_trips_per_get"+m.suffix, f.GetSQL.RoundTripsPer)
		for _, side := range []struct {
			prefix string
			a      *apiSamples
		}{{"", a}, {"floor_", f}} {
			p := side.prefix
			r.Set(p+"create_run_p50_ms"+m.suffix, report.Percentile(side.a.Create, 50))
			r.Set(p+"create_run_p99_ms"+m.suffix, report.Percentile(side.a.Create, 99))
			r.Set(p+"create_run_per_s"+m.suffix, float64(len(side.a.Create))/side.a.CreateWall.Seconds())
			r.Set(p+"get_run_p50_ms"+m.suffix, report.Percentile(side.a.Get, 50))
			r.Set(p+"get_run_p99_ms"+m.suffix, report.Percentile(side.a.Get, 99))
			r.Set(p+"get_run_per_s"+m.suffix, float64(len(side.a.Get))/side.a.GetWall.Seconds())
			r.Set(p+"cpu_ms_per_create"+m.suffix, side.a.CreateCPU*1000/float64(len(side.a.Create)))
			r.Set(p+"cpu_ms_per_get"+m.suffix, side.a.GetCPU*1000/float64(len(side.a.Get)))
		}
		for _, k := range []string{"create_run_p50_ms", "create_run_p99_ms", "get_run_p50_ms", "get_run_p99_ms", "cpu_ms_per_create", "cpu_ms_per_get"} {
			if fl := r.Metrics["floor_"+k+m.suffix]; fl > 0 {
				name := strings.TrimSuffix(k, "_ms") + "_ratio_to_floor" + m.suffix
				r.Set(name, r.Metrics[k+m.suffix]/fl)
			}
		}
	}
	return nil
}

// apiTarget is a server measureAPIAt measures: its base URL and its processor
// time so far.
type apiTarget struct {
	URL        string
	CPUSeconds func() float64
}

// apiSamples are what measureAPI saw: each request's latency in milliseconds, the
// wall time of each half, the server's processor seconds in each half, and
// pg_stat_statements per request.
type apiSamples struct {
	Create, Get         []float64
	CreateWall, GetWall time.Duration
	CreateCPU, GetCPU   float64
	CreateSQL, GetSQL   *SQLProfile
}

// mergeSamples joins the samples of rounds of one server: latencies, wall and
// processor times add up; the SQL profiles are the first round's.
func mergeSamples(rounds []*apiSamples) *apiSamples {
	m := &apiSamples{CreateSQL: rounds[0].CreateSQL, GetSQL: rounds[0].GetSQL}
	for _, a := range rounds {
		m.Create = append(m.Create, a.Create...)
		m.Get = append(m.Get, a.Get...)
		m.CreateWall += a.CreateWall
		m.GetWall += a.GetWall
		m.CreateCPU += a.CreateCPU
		m.GetCPU += a.GetCPU
	}
	return m
}

// measureAPI creates total runs of the chain through the API-only server from
// clients concurrent clients, then gets each of them. growth measures with it.
func measureAPI(ctx context.Context, e *Env, clients, total int) (*apiSamples, error) {
	return measureAPIAt(ctx, e, apiTarget{URL: e.API.URL, CPUSeconds: e.API.CPUSeconds}, clients, total)
}

// measureAPIAt is measureAPI against the server t (Cairn's, or the floor).
func measureAPIAt(ctx context.Context, e *Env, t apiTarget, clients, total int) (*apiSamples, error) {
	e.Logf("api: %d creates and gets, %d client(s), %s", total, clients, t.URL)
	a := &apiSamples{}
	client := cairn.NewClient(t.URL)
	defer client.Close()
	ids := make([]string, total)
	if err := e.resetStatements(ctx); err != nil {
		return nil, err
	}
	var err error
	cpu := t.CPUSeconds()
	a.Create, a.CreateWall, err = hammer(ctx, clients, total, func(i int) error {
		run, err := client.StartRun(ctx, cairn.WorkflowChain)
		ids[i] = run.ID
		return err
	})
	if err != nil {
		return nil, err
	}
	a.CreateCPU = t.CPUSeconds() - cpu
	if a.CreateSQL, err = e.sqlProfile(ctx, "create-run", float64(total), 10); err != nil {
		return nil, err
	}
	if err := e.resetStatements(ctx); err != nil {
		return nil, err
	}
	cpu = t.CPUSeconds()
	a.Get, a.GetWall, err = hammer(ctx, clients, total, func(i int) error {
		_, err := client.GetRun(ctx, ids[i])
		return err
	})
	if err != nil {
		return nil, err
	}
	a.GetCPU = t.CPUSeconds() - cpu
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
