package scenario

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cairnrun/cairn/bench/internal/cairn"
	"github.com/cairnrun/cairn/bench/internal/report"
	"github.com/cairnrun/cairn/internal/pglocal"
)

// The exec scenario: what an exec step costs, where its time goes, and what
// the sandbox, its network namespace, PgBouncer and the function SDKs add.
//
// Every handler is a no-op: it exits at once (shell), or reads its envelope and
// prints null (python, node, go), raw or through the SDK of its language
// (sdk/python, sdk/ts, fn). A sequential round runs ExecRuns runs of a chain of
// execChainSteps such steps one at a time; a map round runs one run whose map
// of ExecItems exec no-op instances runs at max_parallel execMapParallel.
// Each variant is a server configuration (a `cairn serve` started for it)
// and a workflow; the variants are measured in alternated rounds, ExecRounds
// times, so that the machine's drift (it is shared) falls on all of them:
// each figure is the median of its rounds.

const (
	// execChainSteps is the length of a sequential round's chain.
	execChainSteps = 10
	// execMapParallel is the map rounds' max_parallel.
	execMapParallel = 10
)

// execHandler is a no-op handler of one language, raw or on its SDK.
type execHandler struct {
	name  string
	files func(goSDK, goRaw []byte) map[string]cairn.File
	// network none: the step says network: none.
	noNetwork bool
	// needs names what must be built or found for it ("" none, "go").
	needs string
}

// execNoop is the no-op shell handler: the issue's `#!/bin/sh` handler.
const execNoop = "#!/bin/sh\nexit 0\n"

// execHandlers are the handlers measured; the first is the headline.
var execHandlers = []execHandler{
	{name: "sh", files: func(_, _ []byte) map[string]cairn.File {
		return map[string]cairn.File{"bin/noop": {Body: []byte(execNoop), Mode: 0o755}}
	}},
	{name: "sh_nonet", noNetwork: true, files: func(_, _ []byte) map[string]cairn.File {
		return map[string]cairn.File{"bin/noop": {Body: []byte(execNoop), Mode: 0o755}}
	}},
	{name: "python", files: func(_, _ []byte) map[string]cairn.File {
		return map[string]cairn.File{"bin/noop": {Body: []byte("#!/usr/bin/python3\nimport sys\nsys.stdin.read()\nprint('null')\n"), Mode: 0o755}}
	}},
	{name: "python_sdk", files: func(_, _ []byte) map[string]cairn.File {
		f := map[string]cairn.File{"bin/noop": {Body: []byte("#!/usr/bin/python3\nimport cairn_fn\n\nif __name__ == '__main__':\n    cairn_fn.run(lambda call: None)\n"), Mode: 0o755}}
		addTree(f, "sdk/python/cairn_fn", "bin/cairn_fn", ".py")
		return f
	}},
	{name: "node", files: func(_, _ []byte) map[string]cairn.File {
		return map[string]cairn.File{"bin/noop": {Body: []byte("#!/usr/bin/node\nprocess.stdin.resume();\nprocess.stdin.on('end', () => process.stdout.write('null'));\n"), Mode: 0o755}}
	}},
	{name: "node_sdk", files: func(_, _ []byte) map[string]cairn.File {
		f := map[string]cairn.File{"bin/noop.mjs": {Body: []byte("#!/usr/bin/node\nimport { run } from \"@cairnrun/fn\";\nawait run(async () => null);\n"), Mode: 0o755}}
		addTree(f, "sdk/ts", "node_modules/@cairnrun/fn", ".mjs", ".json")
		return f
	}},
	{name: "go", needs: "go", files: func(_, raw []byte) map[string]cairn.File {
		return map[string]cairn.File{"bin/noop": {Body: raw, Mode: 0o755}}
	}},
	{name: "go_sdk", needs: "go", files: func(sdk, _ []byte) map[string]cairn.File {
		return map[string]cairn.File{"bin/noop": {Body: sdk, Mode: 0o755}}
	}},
}

// addTree adds the files of dir (relative to the repository, the benchmark's
// working directory) ending in one of exts under to; node_modules and tests
// are left out.
func addTree(files map[string]cairn.File, dir, to string, exts ...string) {
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "test" || d.Name() == "tests" || d.Name() == "__pycache__") {
			return filepath.SkipDir
		}
		if d.IsDir() || !slices.ContainsFunc(exts, func(x string) bool { return strings.HasSuffix(p, x) }) {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		files[filepath.ToSlash(filepath.Join(to, rel))] = cairn.File{Body: b}
		return nil
	})
}

// execWorkflow names the workflows of a handler: its chain and its map.
func execWorkflow(h, shape string) string {
	return "bench-exec-" + strings.ReplaceAll(h, "_", "-") + "-" + shape
}

// execBundles are the chain and map bundles of h.
func execBundles(h execHandler, items int, goSDK, goRaw []byte) []map[string]cairn.File {
	program := "bin/noop"
	if h.name == "node_sdk" {
		program = "bin/noop.mjs"
	}
	net := ""
	if h.noNetwork {
		net = ", network: none"
	}
	var chain strings.Builder
	fmt.Fprintf(&chain, "name: %s\ndescription: %d no-op exec steps (%s) in a line\nsteps:\n", execWorkflow(h.name, "chain"), execChainSteps, h.name)
	for i := 0; i < execChainSteps; i++ {
		needs := ""
		if i > 0 {
			needs = fmt.Sprintf(", needs: [%s]", cairn.ChainKey(i-1))
		}
		fmt.Fprintf(&chain, "  - {key: %s%s, exec: [\"./%s\"]%s}\n", cairn.ChainKey(i), needs, program, net)
	}
	mapY := fmt.Sprintf("name: %s\ndescription: a map of no-op exec steps (%s)\nsteps:\n", execWorkflow(h.name, "map"), h.name) +
		"  - {key: split, exec: [\"./bin/split\"]}\n" +
		fmt.Sprintf("  - {key: each, needs: [split], map: {over: \"deps.split\", max_parallel: %d}, exec: [\"./%s\"]%s}\n", execMapParallel, program, net) +
		"  - {key: join, needs: [each], builtin: noop}\n"
	var out []map[string]cairn.File
	for _, y := range []string{chain.String(), mapY} {
		f := h.files(goSDK, goRaw)
		f["cairn.yaml"] = cairn.File{Body: []byte(y)}
		f["bin/split"] = cairn.File{Body: []byte(fmt.Sprintf("#!/bin/sh\ncat >/dev/null\nexec seq 0 %d\n", items-1)), Mode: 0o755}
		out = append(out, f)
	}
	return out
}

// execConfig is a server configuration of the scenario.
type execConfig struct {
	name  string
	about string
	// env is added to the server's environment; bin replaces the cairn binary.
	env []string
	bin string
	// handlers are the handlers measured on it, maps the handlers whose map
	// round runs on it; builtin adds the builtin chain (step-to-step of
	// built-ins).
	handlers, maps []string
	builtin        bool
}

// Exec runs the exec scenario.
func Exec(ctx context.Context, e *Env) *report.Result {
	r := e.NewResult("exec")
	err := execScenario(ctx, e, r)
	r.AtMost("sandbox_sh_attempt_p50_ms", 15)
	r.AtLeast("sandbox_sh_map_items_per_s", 100)
	r.Finish(err)
	return r
}

func execScenario(ctx context.Context, e *Env, r *report.Result) error {
	goSDK, goRaw, goErr := buildGoHandlers(ctx, e.Work)
	if goErr != nil {
		e.Logf("exec: the go handlers are left out: %v", goErr)
	}
	configs := []*execConfig{{
		name: "sandbox", about: "`cairn serve` as it ships: bubblewrap, as uid 65534 on a root server, a network namespace through pasta (pooled)",
		handlers: []string{"sh", "sh_nonet", "python", "python_sdk", "node", "node_sdk", "go", "go_sdk"},
		maps:     []string{"sh", "sh_nonet"}, builtin: true,
	}, {
		name: "none", about: "CAIRN_EXEC_ISOLATION=none: handlers unisolated, as the server's user",
		env: []string{"CAIRN_EXEC_ISOLATION=none"}, handlers: []string{"sh"}, maps: []string{"sh"},
	}}
	if b := os.Getenv("BENCH_EXEC_BASELINE"); b != "" {
		configs = append(configs, &execConfig{
			name: "baseline", about: "BENCH_EXEC_BASELINE, another cairn binary (the commit before the exec cuts): " + b,
			bin: b, handlers: []string{"sh", "sh_nonet"}, maps: []string{"sh"},
		})
	}
	bouncer, err := startBouncer(ctx, e)
	if err != nil {
		e.Logf("exec: the PgBouncer variant is left out: %v", err)
	} else {
		defer bouncer.Stop()
		direct := e.PG.URLAs(CatalogRole, e.Catalog())
		pooled, err := bouncer.URL(strings.Replace(direct, CatalogRole+"@", CatalogRole+":"+bouncerPassword+"@", 1))
		if err != nil {
			return err
		}
		configs = append(configs, &execConfig{
			name: "pgbouncer", about: "as sandbox, with the catalog through PgBouncer in transaction mode (CAIRN_DATABASE_POOL_MODE=transaction, pool 20; LISTEN on a direct connection, CAIRN_DATABASE_LISTEN_URL)",
			env:      []string{"CAIRN_DATABASE_URL=" + pooled, "CAIRN_DATABASE_POOL_MODE=transaction", "CAIRN_DATABASE_LISTEN_URL=" + direct},
			handlers: []string{"sh"}, maps: []string{"sh"}, builtin: true,
		})
	}

	items := e.Scale.ExecItems
	byName := map[string]execHandler{}
	for _, h := range execHandlers {
		if h.needs == "go" && goErr != nil {
			continue
		}
		byName[h.name] = h
		for _, b := range execBundles(h, items, goSDK, goRaw) {
			if _, err := e.Client.Deploy(ctx, b); err != nil {
				return fmt.Errorf("deploy %s: %w", h.name, err)
			}
		}
	}
	if _, err := e.Client.Deploy(ctx, cairn.ChainBundle()); err != nil {
		return err
	}
	settings := map[string]any{}
	for _, c := range configs {
		settings[c.name] = c.about
	}
	r.Settings["servers"] = settings
	r.Settings["chain"] = fmt.Sprintf("%d runs of %d no-op exec steps in a line, one run at a time", e.Scale.ExecRuns, execChainSteps)
	r.Settings["map"] = fmt.Sprintf("one run: an exec step prints %d items, a map of no-op exec steps over them (max_parallel %d), a builtin join", items, execMapParallel)
	r.Settings["rounds"] = fmt.Sprintf("%d; in each, every server in turn, its chains then its maps; each figure is the median of its rounds (the machine is shared: compare the variants of one run)", e.Scale.ExecRounds)
	r.Settings["handlers"] = "sh: `#!/bin/sh\\nexit 0`; python, node, go: read the envelope, print null; *_sdk: the same on sdk/python (cairn_fn.run), sdk/ts (run), fn (fn.Run); sh_nonet: sh with network: none"
	r.Settings["figures"] = "attempt = attempts.finished_at − started_at (claim → outcome, the catalog's clock); step_to_step = next started_at − previous finished_at; start = cairn_attempt_start_seconds (claim → handler started); phase_* = means of cairn_exec_phase_seconds and cairn_attempt_phase_seconds over the round; cpu_* = processor ms per attempt: cairn (the serve process), children (its reaped children: unsandboxed handlers, bwrap, pasta; a sandboxed handler's own processes are not counted, its PID namespace does not pass their time on), postgres (the cluster), handler and network (cairn_exec_cpu_seconds_total); cairn and postgres include their idle work over the round's wall time; statements = top-level statements on the catalog's database per attempt (pg_stat_statements: round trips to PostgreSQL, whatever the load; the benchmark's own polls left out)"
	r.Settings["machine_note"] = "the machine is shared with other jobs (see machine.load_average_*): compare the variants of one run, whose rounds alternate, not these figures with another run's"

	samples := map[string][]float64{}
	add := func(name string, v float64) { samples[name] = append(samples[name], v) }
	for round := 1; round <= e.Scale.ExecRounds; round++ {
		for _, c := range configs {
			if err := execRound(ctx, e, c, byName, round, add); err != nil {
				return fmt.Errorf("%s, round %d: %w", c.name, round, err)
			}
		}
	}
	for name, xs := range samples {
		r.Set(name, report.Percentile(xs, 50))
	}
	// Ratios of the same run: what the sandbox, the network namespace, the
	// SDKs and PgBouncer add.
	ratio := func(name, a, b string) {
		if x, y := r.Metrics[a], r.Metrics[b]; x > 0 && y > 0 {
			r.Set(name, x/y)
		}
	}
	ratio("sandbox_to_none_map_items_ratio", "sandbox_sh_map_items_per_s", "none_sh_map_items_per_s")
	ratio("network_to_nonet_map_items_ratio", "sandbox_sh_map_items_per_s", "sandbox_sh_nonet_map_items_per_s")
	ratio("pgbouncer_to_direct_map_items_ratio", "pgbouncer_sh_map_items_per_s", "sandbox_sh_map_items_per_s")
	ratio("pgbouncer_to_direct_builtin_step_to_step_ratio", "pgbouncer_builtin_step_to_step_p50_ms", "sandbox_builtin_step_to_step_p50_ms")
	ratio("baseline_to_sandbox_attempt_ratio", "baseline_sh_attempt_p50_ms", "sandbox_sh_attempt_p50_ms")
	for _, l := range []string{"python", "node", "go"} {
		if a, b := r.Metrics["sandbox_"+l+"_sdk_attempt_p50_ms"], r.Metrics["sandbox_"+l+"_attempt_p50_ms"]; a > 0 && b > 0 {
			r.Set("sdk_overhead_"+l+"_ms", a-b)
		}
	}
	return nil
}

// execRound starts c's server and runs its chains and maps once.
func execRound(ctx context.Context, e *Env, c *execConfig, handlers map[string]execHandler, round int, add func(string, float64)) error {
	servers, err := e.StartDispatchers(ctx, 1, func(sc *cairn.ServerConfig) {
		if c.bin != "" {
			sc.Bin = c.bin
		}
		sc.Env = append(slices.Clone(sc.Env), c.env...)
	})
	if err != nil {
		return err
	}
	defer StopAll(servers)
	srv := servers[0]
	client := cairn.NewClient(srv.URL)
	defer client.Close()
	type job struct {
		handler, workflow string
		isMap             bool
	}
	var jobs []job
	if c.builtin {
		jobs = append(jobs, job{"builtin", cairn.WorkflowChain, false})
	}
	for _, h := range c.handlers {
		if _, ok := handlers[h]; ok {
			jobs = append(jobs, job{h, execWorkflow(h, "chain"), false})
		}
	}
	for _, h := range c.maps {
		if _, ok := handlers[h]; ok {
			jobs = append(jobs, job{h, execWorkflow(h, "map"), true})
		}
	}
	for _, j := range jobs {
		if err := e.ResetCatalog(ctx); err != nil {
			return err
		}
		m0, err := srv.MetricSeries(ctx)
		if err != nil {
			return err
		}
		cpu0, pg0 := srv.CPU(), e.PG.CPUSeconds()
		st0, err := e.catalogStatements(ctx)
		if err != nil {
			return err
		}
		var ids []string
		runs := e.Scale.ExecRuns
		if j.isMap {
			runs = 1
		}
		e.Logf("exec: round %d, %s, %s: %d run(s)", round, c.name, j.workflow, runs)
		start := time.Now()
		for i := 0; i < runs; i++ {
			run, err := client.StartRun(ctx, j.workflow)
			if err != nil {
				return err
			}
			if err := waitRun(ctx, e, run.ID, 10*time.Minute); err != nil {
				return err
			}
			ids = append(ids, run.ID)
		}
		wall := time.Since(start)
		cpu1, pg1 := srv.CPU(), e.PG.CPUSeconds()
		st1, err := e.catalogStatements(ctx)
		if err != nil {
			return err
		}
		m1, err := srv.MetricSeries(ctx)
		if err != nil {
			return err
		}
		prefix := c.name + "_" + j.handler
		if j.isMap {
			prefix += "_map"
		}
		attempts, err := execAttempts(ctx, e, ids, j.isMap, add, prefix)
		if err != nil {
			return err
		}
		if attempts == 0 {
			return fmt.Errorf("%s: no attempt measured", j.workflow)
		}
		perAttempt := func(s float64) float64 { return s * 1000 / float64(attempts) }
		add(prefix+"_cpu_cairn_ms", perAttempt(cpu1.Self-cpu0.Self))
		add(prefix+"_cpu_children_ms", perAttempt(cpu1.Children-cpu0.Children))
		add(prefix+"_cpu_postgres_ms", perAttempt(pg1-pg0))
		add(prefix+"_statements", (st1-st0)/float64(attempts))
		add(prefix+"_wall_s", wall.Seconds())
		for key, v := range m1 {
			d := v - m0[key]
			switch {
			case strings.HasPrefix(key, "cairn_exec_cpu_seconds_total|"):
				add(prefix+"_cpu_"+strings.TrimPrefix(key, "cairn_exec_cpu_seconds_total|")+"_ms", perAttempt(d))
			case strings.HasSuffix(key, "_sum") && d > 0:
				n := m1[strings.TrimSuffix(key, "_sum")+"_count"] - m0[strings.TrimSuffix(key, "_sum")+"_count"]
				if n <= 0 {
					continue
				}
				name := strings.TrimSuffix(key, "_sum")
				switch {
				case strings.HasPrefix(name, "cairn_exec_phase_seconds|"):
					add(prefix+"_phase_exec_"+strings.TrimPrefix(name, "cairn_exec_phase_seconds|")+"_ms", d/n*1000)
				case strings.HasPrefix(name, "cairn_attempt_phase_seconds|exec,"):
					add(prefix+"_phase_"+strings.TrimPrefix(name, "cairn_attempt_phase_seconds|exec,")+"_ms", d/n*1000)
				case name == "cairn_attempt_start_seconds|" && !strings.HasPrefix(j.handler, "builtin"):
					add(prefix+"_start_ms", d/n*1000)
				}
			}
		}
	}
	return nil
}

// execAttempts reads the succeeded attempts of runs ids from the catalog and
// adds their figures: attempt duration and step-to-step (chains), or items/s
// (maps: the instances, from the first start to the last end). It returns how
// many attempts it read.
func execAttempts(ctx context.Context, e *Env, ids []string, isMap bool, add func(string, float64), prefix string) (int, error) {
	rows, err := e.DB.Query(ctx, `
SELECT a.run_id::text, a.step_key, a.started_at, a.finished_at
FROM attempts a
WHERE a.run_id = ANY($1::uuid[]) AND a.status = 'succeeded'
ORDER BY a.run_id, a.started_at`, ids)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var durations, gaps []float64
	var first, last time.Time
	var prevRun string
	var prevFinished time.Time
	n := 0
	for rows.Next() {
		var run, key string
		var started, finished time.Time
		if err := rows.Scan(&run, &key, &started, &finished); err != nil {
			return 0, err
		}
		if isMap && !strings.Contains(key, "[") {
			continue // the split and the join
		}
		n++
		durations = append(durations, ms(finished.Sub(started)))
		if run == prevRun && !isMap {
			gaps = append(gaps, ms(started.Sub(prevFinished)))
		}
		prevRun, prevFinished = run, finished
		if first.IsZero() || started.Before(first) {
			first = started
		}
		if finished.After(last) {
			last = finished
		}
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, nil
	}
	add(prefix+"_attempt_p50_ms", report.Percentile(durations, 50))
	add(prefix+"_attempt_p99_ms", report.Percentile(durations, 99))
	if isMap {
		add(prefix+"_items_per_s", float64(n)/last.Sub(first).Seconds())
	} else {
		add(prefix+"_step_to_step_p50_ms", report.Percentile(gaps, 50))
	}
	return n, nil
}

// catalogStatements returns the top-level statements run so far on the
// catalog's database (pg_stat_statements, updated as each statement ends, where
// pg_stat_database's commits are flushed up to a second late): what an attempt
// costs PostgreSQL in round trips, whatever the machine's load. The benchmark's
// own reads (waitRun's polls, this one) are left out.
func (e *Env) catalogStatements(ctx context.Context) (float64, error) {
	var n float64
	err := e.DB.QueryRow(ctx, `
SELECT coalesce(sum(calls), 0)::float8 FROM pg_stat_statements
WHERE toplevel AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND query <> $1 AND query NOT LIKE '%pg_stat_statements%'`, waitRunQuery).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("read statement counts: %w", err)
	}
	return n, nil
}

// bouncerPassword is the password the benchmark's PgBouncer checks (PostgreSQL
// itself trusts local connections).
const bouncerPassword = "bench-bouncer"

// startBouncer starts PgBouncer in transaction mode in front of the catalog.
func startBouncer(ctx context.Context, e *Env) (*pglocal.Bouncer, error) {
	dir := filepath.Join(e.Work, "pgbouncer")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return pglocal.StartBouncer(ctx, pglocal.BouncerConfig{
		Dir: dir, Target: "127.0.0.1:" + strconv.Itoa(e.PG.Port), Users: map[string]string{CatalogRole: bouncerPassword},
		PoolMode: "transaction", PoolSize: 20, DieWithParent: true,
	})
}

// buildGoHandlers builds the go handlers from the repository (the benchmark
// runs from its root): a raw one (reads stdin, prints null) and one on fn.
func buildGoHandlers(ctx context.Context, work string) (sdk, raw []byte, err error) {
	dir := filepath.Join(work, "gohandlers")
	srcs := map[string]string{
		"raw": "package main\n\nimport (\n\t\"io\"\n\t\"os\"\n)\n\nfunc main() {\n\t_, _ = io.Copy(io.Discard, os.Stdin)\n\t_, _ = os.Stdout.WriteString(\"null\")\n}\n",
		"sdk": "package main\n\nimport (\n\t\"context\"\n\n\t\"github.com/cairnrun/cairn/fn\"\n)\n\nfunc main() {\n\tfn.Run(func(context.Context, *fn.Call) (any, error) { return nil, nil })\n}\n",
	}
	out := map[string][]byte{}
	for name, src := range srcs {
		d := filepath.Join(dir, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, nil, err
		}
		if err := os.WriteFile(filepath.Join(d, "main.go"), []byte(src), 0o644); err != nil {
			return nil, nil, err
		}
		bin := filepath.Join(d, "noop")
		// From the repository's root: its go.mod resolves fn.
		cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, filepath.Join(d, "main.go"))
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, nil, fmt.Errorf("go build %s: %v: %s", name, err, b)
		}
		if out[name], err = os.ReadFile(bin); err != nil {
			return nil, nil, err
		}
	}
	return out["sdk"], out["raw"], nil
}
