package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/client"
	"github.com/cairnrun/cairn/internal/testenv"
)

// Environment of the chaos test: CAIRN_CHAOS_RUNS (default 30) runs, started over
// CAIRN_CHAOS_SECONDS (default 24) seconds of chaos; CAIRN_CHAOS_SEED repeats a
// schedule of kills (its seed is logged).
const (
	envChaosRuns    = "CAIRN_CHAOS_RUNS"
	envChaosSeconds = "CAIRN_CHAOS_SECONDS"
	envChaosSeed    = "CAIRN_CHAOS_SEED"
)

// chaosWorkflow counts to 20 with a checkpoint at each step (an attempt resumes
// from the newest one), then writes an output far over the inline limit (a blob in
// S3) that the next step reads from its local file.
var chaosWorkflow = map[string]string{
	"cairn.yaml": `name: chaos
defaults:
  retry: {max_attempts: 20, backoff: fixed, delay: 100ms}
steps:
  - {key: count, exec: ["./bin/count"]}
  - {key: check, needs: [count], exec: ["./bin/check"]}
  - {key: nap, needs: [count], builtin: sleep, with: {duration: 300ms}}
  - {key: join, needs: [check, nap], builtin: noop}
`,
	"bin/count": `#!/bin/bash
read -r envelope
start=$(grep -o '"checkpoint":{"i":[0-9]*' <<<"$envelope" | grep -o '[0-9]*$')
for ((i=${start:-0}+1; i<=20; i++)); do
  sleep 0.1
  echo "{\"checkpoint\":{\"i\":$i}}" >&3
done
echo "{\"progress\":{\"resumed_from\":${start:-0}}}" >&3
seq 1 3000
`,
	"bin/check": `#!/bin/bash
read -r envelope
path=$(grep -o '"path":"[^"]*"' <<<"$envelope" | cut -d'"' -f4)
echo "{\"lines\":$(wc -l < "$path")}"
`,
}

// chaosStack is the chaos test's view of its servers: which live, which were
// killed, and every 5xx answer any of them gave.
type chaosStack struct {
	t  *testing.T
	st *stack

	mu     sync.Mutex
	live   []*server
	killed []*server
	errors []chaosAnswer // 5xx answers
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

// killOne kills a live server at random with SIGKILL and starts a new one in its
// place.
func (cs *chaosStack) killOne(r *rand.Rand, opts serverOptions) {
	cs.mu.Lock()
	i := r.IntN(len(cs.live))
	victim := cs.live[i]
	cs.live = append(cs.live[:i], cs.live[i+1:]...)
	cs.killed = append(cs.killed, victim)
	cs.mu.Unlock()
	victim.kill()
	s := cs.st.start(opts)
	cs.mu.Lock()
	cs.live = append(cs.live, s)
	cs.mu.Unlock()
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

// TestChaos: three `cairn serve` processes on one PostgreSQL and one S3 server; a
// random one is SIGKILLed every few seconds and replaced, and PostgreSQL crashes
// once and comes back 5 s later, while runs with checkpoints and blob outputs are
// started through random servers (with idempotency keys, retried as a client
// would). Every run succeeds with exactly one successful attempt per step; only
// killed servers' attempts are interrupted; no 5xx outside the outage, and none
// but 503 within it. Longer runs: CAIRN_CHAOS_RUNS=300 CAIRN_CHAOS_SECONDS=300.
func TestChaos(t *testing.T) {
	t.Parallel()
	runs := envInt(t, envChaosRuns, 30)
	chaos := time.Duration(envInt(t, envChaosSeconds, 24)) * time.Second
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
	opts := serverOptions{inlineLimit: 1024, env: []string{"CAIRN_EXEC_ISOLATION=bwrap"}}
	cs := &chaosStack{t: t, st: st}
	for range 3 {
		cs.live = append(cs.live, st.start(opts))
	}
	cs.live[0].api().deploy(chaosWorkflow)

	// The schedule: runs started evenly over the chaos; a kill every 2 to 4 s;
	// PostgreSQL down from a third of the way for 5 s, with no kill meanwhile (a
	// server cannot start without its database).
	start := time.Now()
	outageAt := start.Add(chaos / 3)
	const outage = 5 * time.Second
	var down, back time.Time
	nextKill := start.Add(2 * time.Second)
	ids := make([]string, runs)
	for i := 0; i < runs || time.Since(start) < chaos || back.IsZero(); {
		now := time.Now()
		switch {
		case down.IsZero() && now.After(outageAt):
			down = time.Now()
			require.NoError(t, pg.Kill())
		case !down.IsZero() && back.IsZero() && now.After(down.Add(outage)):
			ctx, cancel := withTimeout(time.Minute)
			require.NoError(t, pg.Start(ctx))
			cancel()
			back = time.Now()
			nextKill = back.Add(2 * time.Second)
			t.Logf("PostgreSQL down from %s to %s", down.Sub(start).Round(time.Millisecond), back.Sub(start).Round(time.Millisecond))
		case now.After(nextKill) && now.Before(start.Add(chaos)) && (down.IsZero() || !back.IsZero()):
			cs.killOne(r, opts)
			nextKill = time.Now().Add(2*time.Second + time.Duration(r.Int64N(int64(2*time.Second))))
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
	t.Logf("%d runs started, %d servers killed in %s", runs, len(cs.killed), time.Since(start).Round(time.Millisecond))

	// Every run succeeds.
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
	}, 2*time.Minute, 200*time.Millisecond, "waiting for every run to end")
	if failed != nil {
		t.Fatalf("run %s %s: %s", failed.Id, failed.Status, jsonOf(failed.Error))
	}
	t.Logf("every run finished %s after the start", time.Since(start).Round(time.Millisecond))

	// Exactly one successful attempt per step; interrupted attempts only on killed
	// servers; outputs whole.
	api := cs.pick(r).api()
	interrupted := 0
	for _, id := range ids {
		for _, step := range api.mustSteps(id) {
			succeeded := 0
			for _, at := range api.mustAttempts(id, step.Key) {
				switch at.Status {
				case client.AttemptStatusSucceeded:
					succeeded++
				case client.AttemptStatusInterrupted:
					interrupted++
					require.True(t, cs.isKilled(at.Dispatcher), "run %s step %s attempt %d of live dispatcher %s interrupted: %s",
						id, step.Key, at.Number, at.Dispatcher, jsonOf(at.Error))
				}
			}
			require.Equal(t, 1, succeeded, "run %s step %s", id, step.Key)
		}
		require.JSONEq(t, `{"lines":3000}`, string(api.output(id, "check")), "run %s", id)
	}
	t.Logf("%d attempts interrupted by kills", interrupted)

	// 5xx: none outside the outage (and the reconnection just after it), and within
	// it only 503 (the database cannot be reached).
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, a := range cs.errors {
		require.Equal(t, http.StatusServiceUnavailable, a.status, "%s %s from %s at %s: %s", a.path, http.StatusText(a.status), a.server, a.at.Sub(start), a.body)
		require.True(t, !a.at.Before(down) && a.at.Before(back.Add(5*time.Second)),
			"503 outside the outage: %s from %s at %s (outage %s to %s): %s", a.path, a.server, a.at.Sub(start), down.Sub(start), back.Sub(start), a.body)
	}
	t.Logf("%d answers were 503 during the outage", len(cs.errors))
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
