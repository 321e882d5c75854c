package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/client"
)

// sagaScript appends what it did to LOG, one line per step that succeeded: the
// steps of the DAG their key, the compensations their key once GO exists (the
// compensation of s2 waits for it, having written WAITING, so that the test can
// kill its server while it runs), the on_failure step its key and the failed
// steps its envelope names.
const sagaScript = `#!/bin/bash
envelope=$(cat)
if [ "$CAIRN_STEP" = compensate-s2 ]; then
  echo "$CAIRN_ATTEMPT $$" >> WAITING
  while [ ! -e GO ]; do sleep 0.05; done
fi
line=$CAIRN_STEP
if [ "$CAIRN_STEP" = notify ]; then
  [[ $envelope =~ \"steps\":\[\{\"key\":\"([a-z0-9]+)\" ]] && line="$line ${BASH_REMATCH[1]}"
fi
echo "$line" >> LOG
echo '{"done":"'"$CAIRN_STEP"'"}'
`

// TestCompensationAcrossKill: s1 → s2 → s3, s3 fails. The run is compensating:
// the compensation of s2 runs, and its server is killed with SIGKILL while it
// does; another server takes it over, then compensates s1, then runs the
// on_failure step. Each handler's effect happens exactly once, in that order, and
// the run fails with s3's error. The same servers run a diamond whose skipped
// branch (when false) does not stop a none_failed join.
func TestCompensationAcrossKill(t *testing.T) {
	t.Parallel()
	st := newStack(t, stackOptions{})
	a := st.start(serverOptions{name: "a", leaseTTL: 2 * time.Second})
	api := a.api()
	dir := st.dir
	logPath, waiting, goPath := filepath.Join(dir, "saga.log"), filepath.Join(dir, "waiting"), filepath.Join(dir, "go")
	script := strings.NewReplacer("LOG", logPath, "WAITING", waiting, "GO", goPath).Replace(sagaScript)
	api.deploy(map[string]string{
		"cairn.yaml": `name: saga
on_failure:
  - {key: notify, exec: ["./bin/saga"]}
steps:
  - {key: s1, exec: ["./bin/saga"], compensate: {exec: ["./bin/saga"]}}
  - {key: s2, needs: [s1], exec: ["./bin/saga"], compensate: {exec: ["./bin/saga"], retry: {max_attempts: 3, delay: 100ms}}}
  - {key: s3, needs: [s2], builtin: fail, with: {times: 9}, compensate: {exec: ["./bin/saga"]}}
`,
		"bin/saga": script,
	})
	api.deploy(map[string]string{"cairn.yaml": `name: diamond
steps:
  - {key: a, builtin: echo, with: {value: {n: 2}}}
  - {key: b, needs: [a], builtin: echo, when: "deps.a.n > 5"}
  - {key: c, needs: [a], builtin: echo, when: "deps.a.n <= 5"}
  - {key: d, needs: [b, c], builtin: echo, with: {value: joined}, after: none_failed}
`})
	diamond := api.startRun("diamond", 0, map[string]any{})
	runID := api.startRun("saga", 0, map[string]any{})

	run := api.waitRun(diamond, 30*time.Second)
	require.Equal(t, client.RunStatusSucceeded, run.Status, "run error: %s", jsonOf(run.Error))
	b := api.mustStep(diamond, "b")
	require.Equal(t, client.StepStatusSkipped, b.Status)
	require.Equal(t, client.ConditionFalse, deref(b.SkipReason))
	require.Zero(t, b.Attempts)
	require.Equal(t, client.StepStatusSucceeded, api.mustStep(diamond, "d").Status)

	// The compensation of s2 runs on a, waiting for GO: kill a.
	api.waitStep(runID, "compensate-s2", 30*time.Second, "running", func(s client.Step) bool {
		return s.Status == client.StepStatusRunning
	})
	require.Eventually(t, func() bool { _, err := os.Stat(waiting); return err == nil }, 10*time.Second, 20*time.Millisecond,
		"the compensation of s2 to start")
	r, err := api.run(runID)
	require.NoError(t, err)
	require.Equal(t, client.RunStatusCompensating, r.Status)
	require.Equal(t, client.StepStatusWaiting, api.mustStep(runID, "compensate-s1").Status, "one compensation at a time")
	a.kill()
	// The handler a ran dies with it (its parent-death signal) before it could
	// write anything: only then may the compensation go on, elsewhere.
	orphan := handlerPID(t, waiting, 1)
	require.Eventually(t, func() bool { return processGone(orphan) }, 5*time.Second, 20*time.Millisecond,
		"the handler of the killed server is still running")
	require.NoError(t, os.WriteFile(goPath, nil, 0o644))
	b2 := st.start(serverOptions{name: "b", leaseTTL: 2 * time.Second})
	api = b2.api()

	run = api.waitRun(runID, 60*time.Second)
	require.Equal(t, client.RunStatusFailed, run.Status)
	require.Equal(t, "step s3 failed", errorOf(run.Error).Message, "run error: %s", jsonOf(run.Error))
	require.NotContains(t, string(jsonOf(run.Error)), "handlers_failed")

	logged, err := os.ReadFile(logPath)
	require.NoError(t, err)
	require.Equal(t, "s1\ns2\ncompensate-s2\ncompensate-s1\nnotify s3\n", string(logged),
		"each effect once, compensations in reverse completion order, then on_failure")
	require.Equal(t, []string{"interrupted", "succeeded"}, attemptStatuses(api.mustAttempts(runID, "compensate-s2")))
	require.Equal(t, []string{"succeeded"}, attemptStatuses(api.mustAttempts(runID, "compensate-s1")))
	require.Equal(t, []string{"succeeded"}, attemptStatuses(api.mustAttempts(runID, "notify")))

	steps := map[string]client.Step{}
	for _, s := range api.mustSteps(runID) {
		steps[s.Key] = s
	}
	require.Len(t, steps, 6, "s1, s2, s3, two compensations (s3 failed: nothing to undo), notify")
	require.Equal(t, client.Compensate, steps["compensate-s2"].Phase)
	require.Equal(t, "s2", deref(steps["compensate-s2"].Compensates))
	require.Equal(t, client.OnFailure, steps["notify"].Phase)
	require.False(t, steps["compensate-s1"].StartedAt.Before(*steps["compensate-s2"].FinishedAt))
	require.False(t, steps["notify"].StartedAt.Before(*steps["compensate-s1"].FinishedAt))

	var compensating, failed int
	for _, e := range api.events(runID) {
		switch e.Type {
		case "run.compensating":
			compensating++
		case "run.failed":
			failed++
		}
	}
	require.Equal(t, 1, compensating)
	require.Equal(t, 1, failed)
}
