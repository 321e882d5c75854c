package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/client"
	"github.com/cairnrun/cairn/internal/testenv"
)

// Environment of the chaos test: CAIRN_CHAOS_RUNS (default 30) runs, started over
// CAIRN_CHAOS_SECONDS (default 30) seconds of chaos; CAIRN_CHAOS_SEED repeats a
// schedule of kills (its seed is logged). The size of the outside check the
// engine is held to: CAIRN_CHAOS_RUNS=300 CAIRN_CHAOS_SECONDS=120.
const (
	envChaosRuns    = "CAIRN_CHAOS_RUNS"
	envChaosSeconds = "CAIRN_CHAOS_SECONDS"
	envChaosSeed    = "CAIRN_CHAOS_SEED"
)

// chaosWorkflow is six steps with Python handlers and the default retry policy
// (max_attempts 1: a crash or an outage must fail no step). count counts to 20
// with a checkpoint at each step (an attempt resumes from the newest one), then
// writes an output far over the inline limit (a blob in S3) that check reads
// from its local file; square and echo are short handlers after it.
var chaosWorkflow = map[string]string{
	"cairn.yaml": `name: chaos
steps:
  - {key: count, exec: ["./bin/count"]}
  - {key: check, needs: [count], exec: ["./bin/check"]}
  - {key: nap, needs: [count], builtin: sleep, with: {duration: 300ms}}
  - {key: square, needs: [check], exec: ["./bin/square"]}
  - {key: echo, needs: [nap], exec: ["./bin/echo"]}
  - {key: join, needs: [square, echo], builtin: noop}
`,
	"bin/count": `#!/usr/bin/env python3
import json, os, sys, time
envelope = json.loads(sys.stdin.readline())
start = (envelope.get("checkpoint") or {}).get("i", 0)
control = os.fdopen(int(os.environ["CAIRN_CONTROL_FD"]), "w", buffering=1)
for i in range(start + 1, 21):
    time.sleep(0.1)
    control.write(json.dumps({"checkpoint": {"i": i}}) + "\n")
control.write(json.dumps({"progress": {"resumed_from": start}}) + "\n")
control.close()
sys.stdout.write("".join("%d\n" % i for i in range(1, 3001)))
`,
	"bin/check": `#!/usr/bin/env python3
import json, sys
def path(v):
    if isinstance(v, dict):
        if isinstance(v.get("path"), str):
            return v["path"]
        for w in v.values():
            p = path(w)
            if p:
                return p
    return None
envelope = json.loads(sys.stdin.readline())
with open(path(envelope["deps"]["count"])) as f:
    print(json.dumps({"lines": sum(1 for _ in f)}))
`,
	"bin/square": `#!/usr/bin/env python3
import json, sys
envelope = json.loads(sys.stdin.readline())
lines = envelope["deps"]["check"]["lines"]
print(json.dumps({"square": lines * lines}))
`,
	"bin/echo": `#!/usr/bin/env python3
import json, sys
envelope = json.loads(sys.stdin.readline())
print(json.dumps({"n": envelope["input"]["n"]}))
`,
}

// chaosStack is the chaos test's view of its servers: which live, which were
// killed, and every 5xx answer any of them gave.
type chaosStack struct {
	t  *testing.T
	st *stack

	mu      sync.Mutex
	live    []*server
	killed  []*server
	errors  []chaosAnswer // 5xx answers
	orphans []string      // handlers that outlived their server
	watched int           // processes of killed servers checked for that
	wg      sync.WaitGroup
}

type chaosAnswer struct {
	at     time.Time
	server string
	path   string
	status int
	body   string
}

// pick returns a live server at random.
func (cs *chaosStack) pick(r *rand.Rand) *server {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.live[r.IntN(len(cs.live))]
}

// call makes one request (what, for the record) of a live server through its API
// client and records a 5xx answer. A server killed meanwhile gives a transport
// error, not an answer.
func (cs *chaosStack) call(s *server, what string, do func(ctx context.Context, c *apiClient) error) error {
	ctx, cancel := withTimeout(10 * time.Second)
	defer cancel()
	err := do(ctx, s.api())
	var p *client.Problem
	if errors.As(err, &p) && p.Status >= 500 {
		cs.mu.Lock()
		cs.errors = append(cs.errors, chaosAnswer{at: time.Now(), server: s.name, path: what, status: int(p.Status), body: p.Error()})
		cs.mu.Unlock()
	}
	return err
}

// killOne kills a live server at random with SIGKILL, alone (not its process
// group: as the kernel's out-of-memory killer or a lost machine would), starts a
// new one in its place, and then checks that none of the killed server's handlers
// outlived it (checkOrphans).
func (cs *chaosStack) killOne(r *rand.Rand, opts serverOptions) {
	cs.mu.Lock()
	i := r.IntN(len(cs.live))
	victim := cs.live[i]
	cs.live = append(cs.live[:i], cs.live[i+1:]...)
	cs.killed = append(cs.killed, victim)
	cs.mu.Unlock()
	before := descendants(victim.pid)
	_ = syscall.Kill(victim.pid, syscall.SIGKILL)
	<-victim.exited
	cs.wg.Add(1)
	go func() {
		defer cs.wg.Done()
		cs.checkOrphans(victim, before)
	}()
	s := cs.st.start(opts)
	cs.mu.Lock()
	cs.live = append(cs.live, s)
	cs.mu.Unlock()
}

// orphanGrace is how long a killed server's handlers may take to die: the
// parent-death signal is immediate, a sandbox's init passes it on.
const orphanGrace = 3 * time.Second

// checkOrphans records the processes of procs (a killed server's descendants
// just before its death) still alive orphanGrace after it.
func (cs *chaosStack) checkOrphans(victim *server, procs []proc) {
	time.Sleep(orphanGrace)
	cs.mu.Lock()
	cs.watched += len(procs)
	cs.mu.Unlock()
	for _, p := range procs {
		if p.alive() {
			cs.mu.Lock()
			cs.orphans = append(cs.orphans, fmt.Sprintf("pid %d (%s) of server %s", p.pid, p.cmdline(), victim.name))
			cs.mu.Unlock()
		}
	}
}

// proc is a process, told apart from a later one of the same pid by its start
// time (in clock ticks since boot).
type proc struct {
	pid   int
	start string
}

// descendants lists the processes below pid, from /proc.
func descendants(pid int) []proc {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]proc{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, start, _, ok := procStat(p)
		if ok {
			children[ppid] = append(children[ppid], proc{pid: p, start: start})
		}
	}
	var out []proc
	queue := []int{pid}
	for len(queue) > 0 {
		for _, c := range children[queue[0]] {
			out = append(out, c)
			queue = append(queue, c.pid)
		}
		queue = queue[1:]
	}
	return out
}

// procStat reads a process's parent, start time and state from /proc/PID/stat.
func procStat(pid int) (ppid int, start string, state string, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, "", "", false
	}
	// The command name, in parentheses, may hold spaces: the fields start after
	// its last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, "", "", false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, "", "", false
	}
	ppid, err = strconv.Atoi(f[1])
	return ppid, f[19], f[0], err == nil
}

// alive reports whether p still runs (and is not a zombie waiting to be reaped).
func (p proc) alive() bool {
	_, start, state, ok := procStat(p.pid)
	return ok && start == p.start && state != "Z"
}

// cmdline is p's command line, for a message.
func (p proc) cmdline() string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.pid))
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

// isKilled reports whether a dispatcher name is one of a killed server.
func (cs *chaosStack) isKilled(dispatcher string) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, s := range cs.killed {
		if s.owns(dispatcher) {
			return true
		}
	}
	return false
}

// waitSucceeded waits until every run of ids has succeeded, asking random live
// servers, and fails the test when one ends otherwise or deadline passes.
func (cs *chaosStack) waitSucceeded(r *rand.Rand, ids []string, deadline time.Time) {
	t := cs.t
	t.Helper()
	pending := map[string]bool{}
	for _, id := range ids {
		pending[id] = true
	}
	var failed *client.Run // a run that ended otherwise: it ends the wait
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for id := range pending {
			var run client.Run
			err := cs.call(cs.pick(r), "get run", func(ctx context.Context, c *apiClient) error {
				uid, err := uuid.Parse(id)
				if err != nil {
					return err
				}
				resp, err := c.cl.GetRunWithResponse(ctx, uid)
				if err == nil {
					run = deref(resp.JSON200)
				}
				return err
			})
			require.NoError(c, err, "get run %s", id)
			if run.Status.Terminal() {
				if run.Status != client.RunStatusSucceeded {
					failed = &run
					return
				}
				delete(pending, id)
			}
		}
		assert.Empty(c, pending, "runs still unfinished")
	}, time.Until(deadline), 200*time.Millisecond, "waiting for every run to end by %s", deadline.Format(time.TimeOnly))
	if failed != nil {
		t.Fatalf("run %s %s: %s", failed.Id, failed.Status, jsonOf(failed.Error))
	}
}

// requireEachStepOnce checks that every step of run id succeeded in exactly one
// attempt (none lost, none duplicated) and that each interrupted attempt was of
// a dispatcher for which mayInterrupt is true (a killed server's: no live lease
// was swept). It returns how many attempts were interrupted.
func (c *apiClient) requireEachStepOnce(t *testing.T, id string, mayInterrupt func(dispatcher string) bool) int {
	t.Helper()
	interrupted := 0
	for _, step := range c.mustSteps(id) {
		succeeded := 0
		for _, at := range c.mustAttempts(id, step.Key) {
			switch at.Status {
			case client.AttemptStatusSucceeded:
				succeeded++
			case client.AttemptStatusInterrupted:
				interrupted++
				require.True(t, mayInterrupt(at.Dispatcher), "run %s step %s attempt %d of live dispatcher %s interrupted: %s",
					id, step.Key, at.Number, at.Dispatcher, jsonOf(at.Error))
			}
		}
		require.Equal(t, 1, succeeded, "run %s step %s", id, step.Key)
	}
	return interrupted
}

// window is a time span of the chaos (an outage).
type window struct{ from, to time.Time }

// TestChaos: three `cairn serve` processes (lease TTL 3 s, handlers in the
// sandbox) on one PostgreSQL and one S3 server; a random one is SIGKILLed every 3
// to 6 s and replaced, PostgreSQL crashes and comes back, then the S3 server,
// each down a fifth of the chaos (at most 10 s), while runs of a six-step workflow
// of Python handlers with the default retry policy are started through random
// servers (with idempotency keys, retried as a client would). Every run succeeds
// within 60 s of the chaos' end, with exactly one successful attempt per step;
// only killed servers' attempts are interrupted (no live lease is swept); no
// handler outlives its server; no 5xx outside the outages, and none but 503
// within them.
func TestChaos(t *testing.T) {
	t.Parallel()
	runs := envInt(t, envChaosRuns, 30)
	chaos := time.Duration(envInt(t, envChaosSeconds, 30)) * time.Second
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(envChaosSeed); v != "" {
		var err error
		seed, err = strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, envChaosSeed)
	}
	t.Logf("%s=%d", envChaosSeed, seed)
	r := rand.New(rand.NewPCG(seed, 0))

	pg := testenv.PG(t)
	s3 := testenv.StartS3Process(t, "")
	st := newStack(t, stackOptions{dbURL: testenv.ClusterDatabaseURL(t, pg), blobURL: s3.BlobURL(nil), env: s3.Env()})
	// Handlers in the sandbox of production: it must hold under chaos too.
	requireBwrap(t)
	opts := serverOptions{inlineLimit: 1024, leaseTTL: 3 * time.Second, env: []string{"CAIRN_EXEC_ISOLATION=bwrap"}}
	cs := &chaosStack{t: t, st: st}
	for range 3 {
		cs.live = append(cs.live, st.start(opts))
	}
	cs.live[0].api().deploy(chaosWorkflow)

	// The schedule: runs started evenly over the chaos; a kill every 3 to 6 s;
	// PostgreSQL down from a third of the way, the S3 server from two thirds, with
	// no kill meanwhile (a server is not ready without either).
	start := time.Now()
	end := start.Add(chaos)
	outage := min(10*time.Second, chaos/5)
	type outageState struct {
		name      string
		at        time.Time
		down      func()
		up        func()
		w         window
		completed bool
	}
	outages := []*outageState{
		{name: "PostgreSQL", at: start.Add(chaos / 3), down: func() { require.NoError(t, pg.Kill()) }, up: func() {
			ctx, cancel := withTimeout(time.Minute)
			defer cancel()
			require.NoError(t, pg.Start(ctx))
		}},
		{name: "S3", at: start.Add(2 * chaos / 3), down: s3.Kill, up: s3.Start},
	}
	inOutage := func(now time.Time) bool {
		for _, o := range outages {
			if !o.w.from.IsZero() && !o.completed {
				return true
			}
		}
		return false
	}
	nextKill := start.Add(2 * time.Second)
	ids := make([]string, runs)
	for i := 0; i < runs || time.Now().Before(end) || !outages[len(outages)-1].completed; {
		now := time.Now()
		acted := false
		for _, o := range outages {
			switch {
			case o.w.from.IsZero() && now.After(o.at) && !inOutage(now):
				o.w.from = time.Now()
				o.down()
				acted = true
			case !o.w.from.IsZero() && !o.completed && now.After(o.w.from.Add(outage)):
				o.up()
				o.w.to, o.completed = time.Now(), true
				nextKill = o.w.to.Add(time.Second)
				t.Logf("%s down from %s to %s", o.name, o.w.from.Sub(start).Round(time.Millisecond), o.w.to.Sub(start).Round(time.Millisecond))
				acted = true
			}
		}
		switch {
		case acted:
		case now.After(nextKill) && now.Before(end) && !inOutage(now):
			cs.killOne(r, opts)
			nextKill = time.Now().Add(3*time.Second + time.Duration(r.Int64N(int64(3*time.Second))))
		case i < runs && now.After(start.Add(time.Duration(i)*chaos/time.Duration(runs))):
			// A client retries with the same key until the run is accepted.
			key := fmt.Sprintf("chaos-%d-%d", seed, i)
			var run *client.Run
			err := cs.call(cs.pick(r), "start run", func(ctx context.Context, c *apiClient) (err error) {
				run, err = c.cl.CreateRun(ctx, "chaos", client.StartRunBody{Input: map[string]int{"n": i}}, key)
				return err
			})
			if err == nil {
				ids[i] = run.Id
				i++
				continue
			}
			time.Sleep(50 * time.Millisecond)
		case i > 0:
			// A client watching: the steps of a run started so far.
			id := ids[r.IntN(i)]
			_ = cs.call(cs.pick(r), "list steps", func(ctx context.Context, c *apiClient) error {
				_, err := c.cl.ListStepsWithResponse(ctx, uuid.MustParse(id)) // an ID the API gave
				return err
			})
			time.Sleep(20 * time.Millisecond)
		default:
			time.Sleep(20 * time.Millisecond)
		}
	}
	chaosEnd := time.Now()
	t.Logf("%d runs started, %d servers killed in %s", runs, len(cs.killed), chaosEnd.Sub(start).Round(time.Millisecond))

	// Every run succeeds, within 60 s of the chaos' end.
	cs.waitSucceeded(r, ids, chaosEnd.Add(60*time.Second))
	t.Logf("every run finished %s after the chaos' end", time.Since(chaosEnd).Round(time.Millisecond))

	// Exactly one successful attempt per step; interrupted attempts only on killed
	// servers (no live lease swept); outputs whole.
	api := cs.pick(r).api()
	interrupted := 0
	for i, id := range ids {
		interrupted += api.requireEachStepOnce(t, id, cs.isKilled)
		require.JSONEq(t, `{"lines":3000}`, string(api.output(id, "check")), "run %s", id)
		require.JSONEq(t, `{"square":9000000}`, string(api.output(id, "square")), "run %s", id)
		require.JSONEq(t, fmt.Sprintf(`{"n":%d}`, i), string(api.output(id, "echo")), "run %s", id)
	}
	t.Logf("%d attempts interrupted by kills", interrupted)

	// No handler outlived its server.
	cs.wg.Wait()
	cs.mu.Lock()
	defer cs.mu.Unlock()
	require.Empty(t, cs.orphans, "handlers alive %s after their server was SIGKILLed", orphanGrace)
	t.Logf("%d processes of killed servers (handlers, sandboxes) all died with them", cs.watched)

	// 5xx: none outside the outages (and the reconnection just after them), and
	// within them only 503 (the database or the blob store cannot be reached).
	for _, a := range cs.errors {
		require.Equal(t, http.StatusServiceUnavailable, a.status, "%s %s from %s at %s: %s", a.path, http.StatusText(a.status), a.server, a.at.Sub(start), a.body)
		within := false
		for _, o := range outages {
			within = within || (!a.at.Before(o.w.from) && a.at.Before(o.w.to.Add(5*time.Second)))
		}
		require.True(t, within, "503 outside the outages: %s from %s at %s: %s", a.path, a.server, a.at.Sub(start), a.body)
	}
	t.Logf("%d answers were 503 during the outages", len(cs.errors))
}

// envInt reads a positive integer from the environment, or def.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, name)
	require.Positive(t, n, name)
	return n
}
