package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/client"
)

// countScript counts from its checkpoint to 30, one step per 100 ms, adding each
// number to a running sum; after each step it checkpoints {"i": N, "sum": S} on fd 3.
// Its output says where it started, so a test can tell a resumed attempt from a
// fresh one, and the sum proves that no step was lost or counted twice. It appends
// its pid to PIDS so the test can watch the handler it orphans.
const countScript = `#!/bin/bash
read -r envelope
i=0 sum=0
if [[ $envelope =~ \"checkpoint\":(\{[^}]*\}) ]]; then
  cp=${BASH_REMATCH[1]}
  [[ $cp =~ \"i\":\ *([0-9]+) ]] && i=${BASH_REMATCH[1]}
  [[ $cp =~ \"sum\":\ *([0-9]+) ]] && sum=${BASH_REMATCH[1]}
fi
start=$i
echo "$CAIRN_ATTEMPT $$" >> PIDS
while [ "$i" -lt 30 ]; do
  sleep 0.1
  i=$((i + 1)) sum=$((sum + i))
  printf '{"checkpoint":{"i":%d,"sum":%d}}\n' "$i" "$sum" >&3
done
printf '{"start":%d,"end":%d,"sum":%d,"attempt":%d}\n' "$start" "$i" "$sum" "$CAIRN_ATTEMPT"
`

// TestCrashResumesFromCheckpoint: a dispatcher killed with SIGKILL during an exec step
// that checkpoints every 100 ms. Another dispatcher sweeps the expired lease and
// resumes the step from its last checkpoint; the attempt that died is interrupted,
// the upstream step that had succeeded is not run again, and the output is right.
func TestCrashResumesFromCheckpoint(t *testing.T) {
	t.Parallel()
	st := newStack(t, stackOptions{})
	const ttl = 2 * time.Second
	// Two servers from the start: whichever claims the step is killed, the other
	// takes over. (Starting the second one later would race with the counting.)
	servers := []*server{st.start(serverOptions{leaseTTL: ttl}), st.start(serverOptions{leaseTTL: ttl})}
	api := servers[0].api()

	pids := filepath.Join(st.dir, "pids")
	api.deploy(map[string]string{
		"cairn.yaml": `name: crash
steps:
  - key: prepare
    builtin: echo
  - key: count
    needs: [prepare]
    exec: ["./bin/count"]
    timeout: 1m
    retry: {max_attempts: 3, delay: 100ms}
`,
		"bin/count": strings.ReplaceAll(countScript, "PIDS", pids),
	})
	runID := api.startRun("crash", 0, map[string]any{"n": 1})

	// Wait until the handler has checkpointed past 5.
	var seen struct{ I, Sum int }
	step := api.waitStep(runID, "count", 20*time.Second, "a checkpoint with i >= 5", func(s client.Step) bool {
		if s.Status != client.StepStatusRunning || s.LeaseOwner == nil || s.Checkpoint == nil {
			return false
		}
		return json.Unmarshal(jsonOf(s.Checkpoint), &seen) == nil && seen.I >= 5
	})
	a, b := servers[0], servers[1]
	if !a.owns(*step.LeaseOwner) {
		a, b = b, a
	}
	require.True(t, a.owns(*step.LeaseOwner), "lease owner %s", *step.LeaseOwner)

	killed := time.Now()
	a.kill()
	t.Logf("killed server %s (pid %d) at checkpoint i=%d", a.name, a.pid, seen.I)
	apiB := b.api()

	// The handler of the dead dispatcher is in a process group of its own (the exec
	// invoker's Setpgid), so the kill of A's group does not reach it; the kernel's
	// parent-death signal does (and SIGPIPE on its next checkpoint would too).
	orphan := handlerPID(t, pids, 1)
	require.Eventually(t, func() bool { return processGone(orphan) }, 5*time.Second, 20*time.Millisecond,
		"orphaned handler %d of the killed dispatcher is still running", orphan)

	run := apiB.waitRun(runID, 30*time.Second)
	require.Equal(t, client.RunStatusSucceeded, run.Status, "run error: %s", jsonOf(run.Error))

	attempts := apiB.mustAttempts(runID, "count")
	require.Equal(t, []string{"interrupted", "succeeded"}, attemptStatuses(attempts))
	require.True(t, a.owns(attempts[0].Dispatcher), "attempt 1 ran on %s", attempts[0].Dispatcher)
	require.True(t, b.owns(attempts[1].Dispatcher), "attempt 2 ran on %s", attempts[1].Dispatcher)
	require.NotNil(t, attempts[0].Error)
	require.Equal(t, "lease_expired", errorOf(attempts[0].Error).Code)

	// Recovery time. The lease outlives the kill by at most the TTL (heartbeats
	// renew it to now + TTL); B's sweeper runs every SweepInterval = TTL/2, each
	// wait jittered to [½, 1½]·SweepInterval, so it finds the expired lease at most
	// ¾·TTL later and claims the step at once. The promise is TTL + 2s, which holds
	// for TTL = 2s (worst case 3.5s); the assertion adds 1s to that worst case for
	// the claim round trip on a loaded machine.
	recovery := attempts[1].StartedAt.Sub(killed)
	t.Logf("recovery: attempt 2 started %s after the kill (lease TTL %s, promised ≤ %s)",
		recovery.Round(time.Millisecond), ttl, ttl+2*time.Second)
	require.LessOrEqual(t, recovery, ttl+ttl*3/4+time.Second)

	// The output: resumed at or after the checkpoint seen before the kill, from
	// exactly the last checkpoint attempt 1 stored, with the right sum.
	var out struct{ Start, End, Sum, Attempt int }
	require.NoError(t, json.Unmarshal(apiB.output(runID, "count"), &out))
	require.Equal(t, 2, out.Attempt)
	require.GreaterOrEqual(t, out.Start, seen.I)
	require.Equal(t, 30, out.End)
	require.Equal(t, 30*31/2, out.Sum)

	// The upstream step that had succeeded before the kill ran once.
	require.Len(t, apiB.mustAttempts(runID, "prepare"), 1)

	// The history shows the checkpoints of attempt 1, the last of which is where
	// attempt 2 started, and the interruption.
	var lastCheckpoint int
	checkpoints, interrupted := 0, false
	for _, e := range apiB.events(runID) {
		if deref(e.Step) != "count" {
			continue
		}
		switch e.Type {
		case "step.checkpointed":
			var d struct{ Checkpoint struct{ I int } }
			require.NoError(t, json.Unmarshal(jsonOf(e.Data), &d))
			if deref(e.Attempt) == 1 {
				checkpoints++
				lastCheckpoint = d.Checkpoint.I
			}
		case "step.retrying":
			var d struct {
				AttemptStatus string `json:"attempt_status"`
			}
			require.NoError(t, json.Unmarshal(jsonOf(e.Data), &d))
			if deref(e.Attempt) == 1 && d.AttemptStatus == "interrupted" {
				interrupted = true
			}
		}
	}
	require.GreaterOrEqual(t, checkpoints, 5)
	require.Equal(t, lastCheckpoint, out.Start, "attempt 2 must start from attempt 1's last checkpoint")
	require.True(t, interrupted, "no step.retrying event with attempt_status interrupted for attempt 1")
}

// handlerPID returns the pid an exec handler of countScript logged for attempt n.
func handlerPID(t *testing.T, path string, attempt int) int {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		n, pid, ok := strings.Cut(line, " ")
		if ok && n == strconv.Itoa(attempt) {
			p, err := strconv.Atoi(pid)
			require.NoError(t, err)
			t.Cleanup(func() {
				if !processGone(p) {
					_ = syscall.Kill(p, syscall.SIGKILL) // never leave a handler behind
				}
			})
			return p
		}
	}
	t.Fatalf("no pid of attempt %d in %s: %q", attempt, path, b)
	return 0
}

// TestSilentHandlerDiesWithItsDispatcher: a handler that writes nothing (so no broken
// pipe would ever stop it) dies when its dispatcher is killed with SIGKILL, instead
// of running on beside the retry.
func TestSilentHandlerDiesWithItsDispatcher(t *testing.T) {
	t.Parallel()
	st := newStack(t, stackOptions{})
	a := st.start(serverOptions{leaseTTL: 2 * time.Second})
	api := a.api()
	pids := filepath.Join(st.dir, "pids")
	api.deploy(map[string]string{
		"cairn.yaml": `name: silent
steps:
  - key: nap
    exec: ["./bin/nap"]
`,
		"bin/nap": "#!/bin/sh\necho \"$CAIRN_ATTEMPT $$\" >> " + pids + "\nexec sleep 60\n",
	})
	runID := api.startRun("silent", 0, nil)
	api.waitStep(runID, "nap", 20*time.Second, "the step to run", func(s client.Step) bool { return s.Status == client.StepStatusRunning })
	// Waiting for the handler to record its pid.
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(pids)
		return err == nil && len(b) > 0
	}, 10*time.Second, 20*time.Millisecond)
	handler := handlerPID(t, pids, 1)
	require.False(t, processGone(handler))
	a.kill()
	require.Eventually(t, func() bool { return processGone(handler) }, 2*time.Second, 10*time.Millisecond,
		"handler %d outlived its dispatcher", handler)
}
