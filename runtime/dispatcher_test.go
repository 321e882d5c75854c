package runtime_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/runtime"
	"github.com/cairnrun/cairn/runtime/runtimetest"
)

type testBundle struct {
	store *catalog.Store
	blobs blobstore.Store
	dbURL string
}

func setup(t *testing.T) (context.Context, *testBundle) {
	t.Helper()
	env := runtimetest.New(t)
	return context.Background(), &testBundle{store: env.Store, blobs: env.Blobs, dbURL: env.DatabaseURL}
}

// env is the bundle as runtimetest's helpers take it.
func (tb *testBundle) env() *runtimetest.Env {
	return &runtimetest.Env{Store: tb.store, Blobs: tb.blobs, DatabaseURL: tb.dbURL}
}

// startDispatcher runs a dispatcher until the test ends (runtimetest.Env.Start).
func startDispatcher(t *testing.T, tb *testBundle, cfg runtime.Config) *runtime.Dispatcher {
	t.Helper()
	return tb.env().Start(t, cfg)
}

// deploy deploys a bundle made of files (runtimetest.Env.Deploy).
func deploy(t *testing.T, tb *testBundle, files map[string]string) *catalog.Version {
	t.Helper()
	return tb.env().Deploy(t, files)
}

func startRun(t *testing.T, tb *testBundle, v *catalog.Version, input string) uuid.UUID {
	t.Helper()
	return tb.env().StartRun(t, v, input)
}

// waitRun waits until the run is terminal and returns it.
func waitRun(t *testing.T, tb *testBundle, id uuid.UUID, within time.Duration) *catalog.Run {
	t.Helper()
	return tb.env().WaitRun(t, id, within)
}

// testingT is what the helpers below need: a *testing.T, or the *assert.CollectT
// of an EventuallyWithT condition.
type testingT interface {
	require.TestingT
	Helper()
}

func stepMap(t testingT, tb *testBundle, id uuid.UUID) map[string]catalog.Step {
	t.Helper()
	steps, err := tb.store.StepList(context.Background(), id)
	require.NoError(t, err)
	out := map[string]catalog.Step{}
	for _, s := range steps {
		out[s.Key] = s
	}
	return out
}

func attempts(t testingT, tb *testBundle, id uuid.UUID, key string) []catalog.Attempt {
	t.Helper()
	a, err := tb.store.AttemptList(context.Background(), id, key)
	require.NoError(t, err)
	return a
}

func TestDiamondOfBuiltins(t *testing.T) {
	t.Parallel()
	_, tb := setup(t)
	startDispatcher(t, tb, runtime.Config{})
	v := deploy(t, tb, map[string]string{"cairn.yaml": `
name: diamond
steps:
  - {key: a, builtin: echo, with: {value: {n: 1}}}
  - {key: b, needs: [a], builtin: noop}
  - {key: c, needs: [a], builtin: echo}
  - {key: d, needs: [b, c], builtin: echo, with: {value: done}}
`})
	id := startRun(t, tb, v, `{"x": 42}`)
	run := waitRun(t, tb, id, 20*time.Second)
	require.Equal(t, catalog.RunSucceeded, run.Status)
	steps := stepMap(t, tb, id)
	require.JSONEq(t, `{"n":1}`, string(steps["a"].Output))
	require.JSONEq(t, `{"x":42}`, string(steps["c"].Output), "echo without a value returns the run's input")
	require.JSONEq(t, `"done"`, string(steps["d"].Output))
	for key, st := range steps {
		require.Equal(t, 1, st.Attempts, key)
	}
}

func TestRetryThenSucceed(t *testing.T) {
	t.Parallel()
	_, tb := setup(t)
	startDispatcher(t, tb, runtime.Config{})
	v := deploy(t, tb, map[string]string{"cairn.yaml": `
name: retry
steps:
  - key: flaky
    builtin: fail
    with: {times: 2}
    retry: {max_attempts: 3, backoff: linear, delay: 200ms}
`})
	id := startRun(t, tb, v, "")
	run := waitRun(t, tb, id, 20*time.Second)
	require.Equal(t, catalog.RunSucceeded, run.Status)
	a := attempts(t, tb, id, "flaky")
	require.Len(t, a, 3)
	require.Equal(t, []catalog.AttemptStatus{catalog.AttemptFailed, catalog.AttemptFailed, catalog.AttemptSucceeded}, []catalog.AttemptStatus{a[0].Status, a[1].Status, a[2].Status})
	// Linear backoff: ≥200ms before attempt 2, ≥400ms before attempt 3.
	require.GreaterOrEqual(t, a[1].StartedAt.Sub(*a[0].FinishedAt), 200*time.Millisecond)
	require.GreaterOrEqual(t, a[2].StartedAt.Sub(*a[1].FinishedAt), 400*time.Millisecond)
}

func TestTerminalFailureSkipsExactlyDependents(t *testing.T) {
	t.Parallel()
	_, tb := setup(t)
	startDispatcher(t, tb, runtime.Config{})
	v := deploy(t, tb, map[string]string{"cairn.yaml": `
name: branches
defaults:
  retry: {max_attempts: 3}
steps:
  - {key: root, builtin: noop}
  - {key: bad, needs: [root], builtin: fail, with: {retryable: false, message: broken}}
  - {key: after-bad, needs: [bad], builtin: noop}
  - {key: after-after, needs: [after-bad], builtin: noop}
  - {key: good, needs: [root], builtin: sleep, with: {duration: 300ms}}
  - {key: after-good, needs: [good], builtin: noop}
`})
	id := startRun(t, tb, v, "")
	run := waitRun(t, tb, id, 20*time.Second)
	require.Equal(t, catalog.RunFailed, run.Status)
	steps := stepMap(t, tb, id)
	got := map[string]string{}
	for k, s := range steps {
		got[k] = string(s.Status)
	}
	require.Equal(t, map[string]string{"root": "succeeded", "bad": "failed", "after-bad": "skipped", "after-after": "skipped", "good": "succeeded", "after-good": "succeeded"}, got)
	require.Len(t, attempts(t, tb, id, "bad"), 1, "a terminal failure is not retried")
	require.Contains(t, string(steps["bad"].LastError), "broken")
}

// pidAlive reports whether a process exists (and is not a zombie we reaped).
func pidAlive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(b))
	return len(fields) > 2 && fields[2] != "Z"
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	var pid int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	}, 20*time.Second, 10*time.Millisecond, "waiting for the handler to write its pid")
	return pid
}

func TestTimeoutKillsAndRetries(t *testing.T) {
	t.Parallel()
	_, tb := setup(t)
	startDispatcher(t, tb, runtime.Config{})
	pids := t.TempDir()
	v := deploy(t, tb, map[string]string{
		"cairn.yaml": `
name: slow
steps:
  - key: slow
    exec: ["./bin/slow", "` + pids + `"]
    timeout: 500ms
    retry: {max_attempts: 2, backoff: fixed, delay: 300ms}
`,
		"bin/slow": "#!/bin/sh\nsleep 60 &\necho $! > \"$1/child-$CAIRN_ATTEMPT\"\necho $$ > \"$1/pid-$CAIRN_ATTEMPT\"\nwait\n",
	})
	id := startRun(t, tb, v, "")
	run := waitRun(t, tb, id, 30*time.Second)
	require.Equal(t, catalog.RunFailed, run.Status)
	a := attempts(t, tb, id, "slow")
	require.Len(t, a, 2)
	for i, at := range a {
		require.Equal(t, catalog.AttemptTimedOut, at.Status, "attempt %d", i+1)
		for _, name := range []string{"pid", "child"} {
			pid := readPid(t, filepath.Join(pids, fmt.Sprintf("%s-%d", name, i+1)))
			require.Eventually(t, func() bool { return !pidAlive(pid) }, 5*time.Second, 20*time.Millisecond, "waiting for %s %d of attempt %d to be gone", name, pid, i+1)
		}
	}
	require.GreaterOrEqual(t, a[1].StartedAt.Sub(*a[0].FinishedAt), 300*time.Millisecond, "the retry waits for the backoff")
}

func TestCancelKillsRunningHandler(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	startDispatcher(t, tb, runtime.Config{})
	pids := t.TempDir()
	v := deploy(t, tb, map[string]string{
		"cairn.yaml": `
name: sleepy
steps:
  - key: nap
    exec: ["./bin/nap", "` + pids + `"]
  - {key: after, needs: [nap], builtin: noop}
`,
		"bin/nap": "#!/bin/sh\necho $$ > \"$1/pid\"\nexec sleep 60\n",
	})
	id := startRun(t, tb, v, "")
	pid := readPid(t, filepath.Join(pids, "pid"))
	require.True(t, pidAlive(pid))
	canceledAt := time.Now()
	require.NoError(t, tb.store.RunCancel(ctx, id, "test"))
	require.Eventually(t, func() bool { return !pidAlive(pid) }, 5*time.Second, 10*time.Millisecond, "waiting for the handler to be killed")
	t.Logf("handler gone %s after cancel", time.Since(canceledAt))
	require.Less(t, time.Since(canceledAt), 2*time.Second, "killed within about a second")
	run := waitRun(t, tb, id, 5*time.Second)
	require.Equal(t, catalog.RunCanceled, run.Status)
	steps := stepMap(t, tb, id)
	require.Equal(t, catalog.StepCanceled, steps["nap"].Status)
	require.Equal(t, catalog.StepCanceled, steps["after"].Status)
	require.Equal(t, catalog.AttemptCanceled, attempts(t, tb, id, "nap")[0].Status)
}

func TestLargeOutputGoesToBlobStore(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	startDispatcher(t, tb, runtime.Config{Limits: runtime.Limits{InlineLimit: 1024}})
	v := deploy(t, tb, map[string]string{
		"cairn.yaml": `
name: big
steps:
  - {key: produce, exec: ["./bin/produce"]}
  - {key: consume, needs: [produce], exec: ["./bin/consume"]}
`,
		"bin/produce": "#!/bin/sh\nhead -c 3000000 /dev/zero | tr '\\0' 'x'\n",
		// The dependency arrives as {"$blob": {"path": ...}}: count its bytes.
		"bin/consume": "#!/bin/sh\npath=$(sed -n 's/.*\"path\":\"\\([^\"]*\\)\".*/\\1/p')\nprintf '{\"bytes\": %s}' $(wc -c < \"$path\")\n",
	})
	id := startRun(t, tb, v, "")
	run := waitRun(t, tb, id, 30*time.Second)
	require.Equal(t, catalog.RunSucceeded, run.Status, "%s", run.Error)
	steps := stepMap(t, tb, id)
	require.JSONEq(t, `{"bytes": 3000000}`, string(steps["consume"].Output))
	var ref struct {
		Blob struct {
			Digest string `json:"digest"`
			Size   int64  `json:"size"`
		} `json:"$blob"`
	}
	require.NoError(t, json.Unmarshal(steps["produce"].Output, &ref))
	require.EqualValues(t, 3000000, ref.Blob.Size)
	key, err := blobstore.KeyFor("payloads", ref.Blob.Digest)
	require.NoError(t, err)
	rc, obj, err := tb.blobs.Get(ctx, key, blobstore.GetOptions{})
	require.NoError(t, err)
	n, err := io.Copy(io.Discard, rc)
	rc.Close()
	require.NoError(t, err)
	require.EqualValues(t, 3000000, n)
	require.EqualValues(t, 3000000, obj.Size)
}

func TestShutdownHandsLeasesBack(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	// A grace of a second (its hand-back is recorded within another), far under the
	// step's sleep: 200 ms could be cut on a busy machine, as TestStopTwice's was.
	d, err := runtime.New(tb.store, tb.blobs, &runtime.Config{PollInterval: 50 * time.Millisecond, ShutdownGrace: time.Second, DatabaseURL: tb.dbURL, Handlers: runtime.HandlerConfig{CacheDir: t.TempDir()}})
	require.NoError(t, err)
	require.NoError(t, d.Start(ctx))
	v := deploy(t, tb, map[string]string{"cairn.yaml": `
name: handback
steps:
  - {key: long, builtin: sleep, with: {duration: 4s}, retry: {max_attempts: 1}}
`})
	id := startRun(t, tb, v, "")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, catalog.StepRunning, stepMap(c, tb, id)["long"].Status)
	}, 10*time.Second, 10*time.Millisecond, "waiting for the step to start")
	require.NoError(t, d.Stop(ctx))
	a := attempts(t, tb, id, "long")
	require.Len(t, a, 1)
	require.Equal(t, catalog.AttemptInterrupted, a[0].Status)
	require.False(t, a[0].Counted)
	require.Equal(t, catalog.StepReady, stepMap(t, tb, id)["long"].Status)

	// Another dispatcher takes it at once, although max_attempts is 1.
	startDispatcher(t, tb, runtime.Config{})
	run := waitRun(t, tb, id, 20*time.Second)
	require.Equal(t, catalog.RunSucceeded, run.Status)
}

func TestTwoDispatchersRunEveryStepOnce(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	startDispatcher(t, tb, runtime.Config{ID: "one"})
	startDispatcher(t, tb, runtime.Config{ID: "two"})
	v := deploy(t, tb, map[string]string{"cairn.yaml": `
name: five
steps:
  - {key: a, builtin: noop}
  - {key: b, needs: [a], builtin: noop}
  - {key: c, needs: [a], builtin: noop}
  - {key: d, needs: [b, c], builtin: noop}
  - {key: e, needs: [d], builtin: echo}
`})
	const runs = 200
	ids := make([]uuid.UUID, runs)
	for i := range ids {
		ids[i] = startRun(t, tb, v, strconv.Itoa(i))
	}
	for _, id := range ids {
		run := waitRun(t, tb, id, 60*time.Second)
		require.Equal(t, catalog.RunSucceeded, run.Status)
	}
	var dupes, total int
	err := tb.store.DB().GetContext(ctx, &total, `SELECT count(*) FROM attempts WHERE status = 'succeeded'`)
	require.NoError(t, err)
	err = tb.store.DB().GetContext(ctx, &dupes, `SELECT count(*) FROM (SELECT run_id, step_key FROM attempts GROUP BY 1, 2 HAVING count(*) > 1) d`)
	require.NoError(t, err)
	require.Equal(t, runs*5, total, "one successful attempt per step")
	require.Zero(t, dupes, "no step ran twice")
	var owners int
	err = tb.store.DB().GetContext(ctx, &owners, `SELECT count(DISTINCT dispatcher) FROM attempts`)
	require.NoError(t, err)
	require.Equal(t, 2, owners, "both dispatchers took work")
}

// TestDispatcherClaimsOutputs: the output a step stores as a blob is claimed
// before its Put (catalog.Store.BlobClaim), as the blob collector's protocol needs
// (maintenance.Collector).
func TestDispatcherClaimsOutputs(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	startDispatcher(t, tb, runtime.Config{Limits: runtime.Limits{InlineLimit: 8}})
	v := deploy(t, tb, map[string]string{"cairn.yaml": "name: echo\nsteps:\n  - {key: a, builtin: echo}\n"})
	id := startRun(t, tb, v, `{"big enough": true}`)
	waitRun(t, tb, id, 30*time.Second)
	steps, err := tb.store.StepList(ctx, id)
	require.NoError(t, err)
	ref, ok := blobstore.ParseRef(json.RawMessage(steps[0].Output))
	require.True(t, ok, "the output is a blob: %s", steps[0].Output)
	key, err := ref.Key()
	require.NoError(t, err)
	refs, err := tb.store.BlobsKept(ctx, []string{key}, time.Hour)
	require.NoError(t, err)
	require.True(t, refs[key])
	var claims int
	require.NoError(t, tb.store.DB().GetContext(ctx, &claims, `SELECT count(*) FROM blob_claims WHERE blob_key = $1`, key))
	require.Equal(t, 1, claims, "the output's key was claimed")
}
