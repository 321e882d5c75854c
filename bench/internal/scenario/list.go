package scenario

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/cairnrun/cairn/bench/internal/cairn"
	"github.com/cairnrun/cairn/bench/internal/report"
	"github.com/cairnrun/cairn/catalog"
)

// The list scenario's catalog: ListRuns runs over listDays days, labelled with one
// of listTenants tenants (uniform), an env and a region.
const (
	listTenants = 1000
	listDays    = 30
	// listPages is how many pages of one listing are read: the first, then the
	// following ones through next_cursor.
	listPages = 4
	// listMaxInput is the API's maxListedInput (api/runs.go): RunListQuery is
	// explained with the parameters the API passes.
	listMaxInput = 4 << 10
	// listBatch is how many runs one INSERT writes.
	listBatch = 100_000
)

// listQuery is one filter the scenario times.
type listQuery struct {
	name   string // metric prefix
	status string
	limit  int
}

var listQueries = []listQuery{
	// About 7% of runs failed: ~70 of a tenant's ~1,000 at 1,000,000 runs.
	{name: "label_failed", status: "failed", limit: 20},
	// About 90% succeeded: pages of 100 never run out.
	{name: "label_succeeded", status: "succeeded", limit: 100},
}

// List fills the catalog with ListRuns runs straight through SQL and times GET
// /v1/runs with a label and a status filter, the first page and the following
// ones through the cursor, on the API-only server; the JSON holds the plans of the
// list statement (EXPLAIN (ANALYZE, BUFFERS)).
func List(ctx context.Context, e *Env) *report.Result {
	r := e.NewResult("list")
	r.Settings["runs"] = e.Scale.ListRuns
	r.Settings["insert"] = fmt.Sprintf("INSERT … SELECT generate_series in batches of %d: UUIDv7 ids over the last %d days (ordered like created_at), "+
		"3 workflows (60/30/10%%), statuses 90%% succeeded, 7%% failed (4 error codes), 2%% canceled, 1%% running; "+
		"labels {tenant: 1 of %d (uniform), env: prod 80%% | staging, region: 1 of 4}; no step rows (the list reads none); then VACUUM ANALYZE",
		listBatch, listDays, listTenants)
	r.Settings["server"] = "`cairn serve --no-dispatcher` (API only), default settings"
	r.Settings["requests"] = fmt.Sprintf("%d listings per filter, each of a random tenant: the first page, then up to %d following pages through next_cursor, one client, keep-alive",
		e.Scale.ListRequests, listPages-1)
	var qs []string
	for _, q := range listQueries {
		qs = append(qs, fmt.Sprintf("%s: label=tenant=<t>&status=%s&limit=%d", q.name, q.status, q.limit))
	}
	r.Settings["queries"] = qs
	err := list(ctx, e, r)
	r.Finish(err)
	return r
}

func list(ctx context.Context, e *Env, r *report.Result) error {
	workflows := []string{cairn.WorkflowOne, cairn.WorkflowChain, cairn.WorkflowSleep}
	bundles := []map[string]cairn.File{cairn.OneBundle(), cairn.ChainBundle(), cairn.SleepBundle()}
	versions := make([]int32, len(workflows))
	for i, b := range bundles {
		v, err := e.Client.Deploy(ctx, b)
		if err != nil {
			return err
		}
		versions[i] = int32(v)
	}
	if err := e.ResetCatalog(ctx); err != nil {
		return err
	}
	defer func() { _ = e.ResetCatalog(context.WithoutCancel(ctx)) }()

	e.Logf("list: inserting %d runs", e.Scale.ListRuns)
	start := time.Now()
	if err := fillRuns(ctx, e, workflows, versions); err != nil {
		return err
	}
	r.Set("insert_s", time.Since(start).Seconds())
	for _, q := range []string{`VACUUM ANALYZE runs`, `CHECKPOINT`} {
		if _, err := e.DB.Exec(ctx, q); err != nil {
			return err
		}
	}
	var size int64
	if err := e.DB.QueryRow(ctx, `SELECT pg_total_relation_size('runs')`).Scan(&size); err != nil {
		return err
	}
	r.Set("runs_table_mib", float64(size)/(1<<20))

	client := cairn.NewClient(e.API.URL)
	defer client.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	tenant := func() string { return fmt.Sprintf("tenant-%04d", rng.IntN(listTenants)) }

	// Warm up the connections and the plan cache of the server: not measured.
	for range 20 {
		if _, _, err := client.ListRuns(ctx, "label="+url.QueryEscape("tenant="+tenant())+"&status=failed&limit=20"); err != nil {
			return err
		}
	}
	for _, q := range listQueries {
		e.Logf("list: %d listings of %s", e.Scale.ListRequests, q.name)
		if err := e.resetStatements(ctx); err != nil {
			return err
		}
		var first, next []float64
		var items float64
		for range e.Scale.ListRequests {
			base := "label=" + url.QueryEscape("tenant="+tenant()) + "&status=" + q.status + fmt.Sprintf("&limit=%d", q.limit)
			cursor := ""
			for page := range listPages {
				query := base
				if cursor != "" {
					query += "&cursor=" + url.QueryEscape(cursor)
				}
				t := time.Now()
				n, c, err := client.ListRuns(ctx, query)
				if err != nil {
					return err
				}
				if page == 0 {
					first = append(first, ms(time.Since(t)))
				} else {
					next = append(next, ms(time.Since(t)))
				}
				items += float64(n)
				if cursor = c; cursor == "" {
					break
				}
			}
		}
		requests := float64(len(first) + len(next))
		prof, err := e.sqlProfile(ctx, "list-runs request", requests, 5)
		if err != nil {
			return err
		}
		e.AddProfile("list "+q.name, prof)
		r.Set(q.name+"_first_page_p50_ms", report.Percentile(first, 50))
		r.Set(q.name+"_first_page_p99_ms", report.Percentile(first, 99))
		if len(next) > 0 {
			r.Set(q.name+"_next_page_p50_ms", report.Percentile(next, 50))
			r.Set(q.name+"_next_page_p99_ms", report.Percentile(next, 99))
		}
		all := append(append([]float64(nil), first...), next...)
		r.Set(q.name+"_p50_ms", report.Percentile(all, 50))
		r.Set(q.name+"_p99_ms", report.Percentile(all, 99))
		r.Set(q.name+"_requests", requests)
		r.Set(q.name+"_items_per_request", items/requests)
		r.Set(q.name+"_sql_exec_ms_per_request", prof.SQLExecMSPer)

		plans, err := explainList(ctx, e, q, "tenant-0042")
		if err != nil {
			return err
		}
		r.Settings["explain_"+q.name] = plans
	}
	return nil
}

// fillRuns inserts ListRuns runs of workflows (at versions) in batches.
func fillRuns(ctx context.Context, e *Env, workflows []string, versions []int32) error {
	n := e.Scale.ListRuns
	now := time.Now()
	from := now.Add(-listDays * 24 * time.Hour).UnixMilli()
	step := float64(now.UnixMilli()-from) / float64(n)
	conn, err := e.DB.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT setseed(0.42)`); err != nil {
		return err
	}
	for lo := 1; lo <= n; lo += listBatch {
		hi := min(lo+listBatch-1, n)
		// The id is a UUIDv7 of the run's millisecond (48 bits of time over a random
		// UUID, version nibble 7), so that ids are time-ordered like created_at.
		_, err := conn.Exec(ctx, `
INSERT INTO runs (id, workflow, version, status, input, error, revision, steps_total, steps_remaining,
                  created_at, started_at, finished_at, labels)
SELECT encode(set_byte(b, 6, (get_byte(b, 6) & 15) | 112), 'hex')::uuid,
       ($4::text[])[w], ($5::int[])[w], st, jsonb_build_object('order', g),
       CASE st WHEN 'failed' THEN jsonb_build_object('message', 'step s failed', 'step', 's',
                   'cause', jsonb_build_object('message', 'boom', 'code', (ARRAY['failed', 'timeout', 'exit', 'infrastructure'])[1 + floor(rc * 4)::int]))
               WHEN 'canceled' THEN '{"message": "canceled by request"}'::jsonb END,
       3, 1, CASE st WHEN 'running' THEN 1 ELSE 0 END,
       at, at + interval '5 ms', CASE WHEN st <> 'running' THEN at + interval '2 s' * rd END,
       jsonb_build_object('tenant', 'tenant-' || lpad(floor(rt * `+fmt.Sprint(listTenants)+`)::int::text, 4, '0'),
                          'env', CASE WHEN re < 0.8 THEN 'prod' ELSE 'staging' END,
                          'region', (ARRAY['eu-west-1', 'us-east-1', 'us-west-2', 'ap-south-1'])[1 + floor(rr * 4)::int])
FROM generate_series($1::int, $2::int) AS g
CROSS JOIN LATERAL (
    SELECT floor($3::float8 + g * $6::float8)::bigint AS ms, random() AS rs, random() AS rw, random() AS rc,
           random() AS rd, random() AS rt, random() AS re, random() AS rr, uuid_send(gen_random_uuid()) AS rnd
    OFFSET 0
) x
CROSS JOIN LATERAL (
    SELECT overlay(x.rnd PLACING substring(int8send(x.ms) FROM 3) FROM 1 FOR 6) AS b,
           to_timestamp(x.ms / 1000.0) AS at,
           CASE WHEN x.rw < 0.6 THEN 1 WHEN x.rw < 0.9 THEN 2 ELSE 3 END AS w,
           CASE WHEN x.rs < 0.90 THEN 'succeeded' WHEN x.rs < 0.97 THEN 'failed'
                WHEN x.rs < 0.99 THEN 'canceled' ELSE 'running' END AS st
) y`, lo, hi, from, workflows, versions, step)
		if err != nil {
			return fmt.Errorf("insert runs %d–%d: %w", lo, hi, err)
		}
	}
	return nil
}

// listArgs is catalog.RunListQuery with the arguments as pgx sends them: the
// values of driver.Valuers (labels, ids) as text, which PostgreSQL reads into the
// parameter's type (pgx would send a Valuer's []byte as bytea).
func listArgs(p *catalog.RunListParams) (string, []any) {
	query, args := catalog.RunListQuery(p)
	out := []any{pgx.QueryExecModeExec}
	for _, a := range args {
		if v, ok := a.(driver.Valuer); ok {
			x, err := v.Value()
			if err != nil {
				panic(err) // labels and ids always have a value
			}
			if b, ok := x.([]byte); ok {
				x = string(b)
			}
			a = x
		}
		out = append(out, a)
	}
	return query, out
}

// explainList returns the plans, EXPLAIN (ANALYZE, BUFFERS), of the list
// statement (catalog.RunListQuery, the statement the server runs) for q and a
// tenant: of its first page and of its second, as the API asks for them (one row
// more than the page, to know whether another follows).
func explainList(ctx context.Context, e *Env, q listQuery, tenant string) (map[string][]string, error) {
	p := &catalog.RunListParams{Status: q.status, Labels: catalog.Labels{"tenant": tenant}, Limit: q.limit + 1, MaxInput: listMaxInput}
	out := map[string][]string{}
	for _, page := range []string{"first_page", "second_page"} {
		query, args := listArgs(p)
		// QueryExecModeExec (listArgs): an unnamed statement, planned with its
		// parameters' values, as lib/pq sends it from the server.
		rows, err := e.DB.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+query, args...)
		if err != nil {
			return nil, fmt.Errorf("explain the list: %w", err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, fmt.Errorf("explain the list: %w", err)
		}
		out[page] = lines
		if page != "first_page" {
			break
		}
		// The second page starts after the first page's last run.
		var last uuid.UUID
		p.Limit = q.limit
		query, args = listArgs(p)
		err = e.DB.QueryRow(ctx, "SELECT id FROM ("+query+") page ORDER BY id ASC LIMIT 1", args...).Scan(&last)
		if errors.Is(err, pgx.ErrNoRows) {
			break // no run matches: no second page
		}
		if err != nil {
			return nil, fmt.Errorf("the first page's last run: %w", err)
		}
		p.Before, p.Limit = last, q.limit+1
	}
	query, _ := catalog.RunListQuery(p)
	out["statement"] = strings.Split(strings.TrimSpace(query), "\n")
	return out, nil
}
