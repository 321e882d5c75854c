package e2e

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/client"
)

// TestSleepSurvivesKill: a run sleeping 30 s survives a SIGKILL of the server that
// started its sleep at second 10, and wakes within 1 s of its time on another server
// of the same database. Nothing of the wait was in the killed process.
func TestSleepSurvivesKill(t *testing.T) {
	t.Parallel()
	st := newStack(t, stackOptions{})
	servers := []*server{st.start(serverOptions{name: "a"}), st.start(serverOptions{name: "b"})}
	api := servers[0].api()
	api.deploy(map[string]string{"cairn.yaml": `name: nap
steps:
  - {key: nap, sleep: 30s}
  - {key: after, needs: [nap], builtin: echo, with: {value: awake}}
`})
	started := time.Now()
	id := api.startRun("nap", 0, map[string]any{})
	nap := api.waitStep(id, "nap", 10*time.Second, "suspended", func(s client.Step) bool {
		return s.Status == client.StepStatusSuspended
	})
	require.NotNil(t, nap.WaitingFor)
	require.Equal(t, client.WaitingForKindSleep, nap.WaitingFor.Kind)
	require.NotNil(t, nap.WaitingFor.Until)
	until := *nap.WaitingFor.Until
	// The sleep's 30s count from its start, between the run's start and now (on
	// a loaded machine the claim may come seconds after the run's start).
	slack := 10 * time.Millisecond
	require.False(t, until.Before(started.Add(30*time.Second-slack)), "until %s before the run started + 30s (%s)", until, started)
	require.False(t, until.After(time.Now().Add(30*time.Second+slack)), "until %s after now + 30s", until)
	require.Nil(t, nap.LeaseOwner, "a sleeping step holds no lease")

	// Kill the server whose dispatcher started the sleep, at second 10.
	attempts := api.mustAttempts(id, "nap")
	require.Len(t, attempts, 1)
	victim, survivor := servers[0], servers[1]
	if servers[1].owns(attempts[0].Dispatcher) {
		victim, survivor = servers[1], servers[0]
	}
	require.True(t, victim.owns(attempts[0].Dispatcher))
	time.Sleep(time.Until(started.Add(10 * time.Second))) // the scenario's clock: kill at second 10
	victim.kill()
	t.Logf("killed %s at %s", victim.name, time.Since(started).Round(time.Millisecond))

	api = survivor.api()
	run := api.waitRun(id, 40*time.Second)
	require.Equal(t, client.RunStatusSucceeded, run.Status)
	nap = api.mustStep(id, "nap")
	require.Equal(t, client.StepStatusSucceeded, nap.Status)
	require.NotNil(t, nap.FinishedAt)
	lag := nap.FinishedAt.Sub(until)
	t.Logf("woke %s after its time", lag.Round(time.Millisecond))
	require.GreaterOrEqual(t, lag, time.Duration(0), "not before its time")
	require.Less(t, lag, time.Second, "within 1 s of its time")
	out, err := json.Marshal(nap.Output)
	require.NoError(t, err)
	require.Contains(t, string(out), "slept_until")
	after := api.mustAttempts(id, "after")
	require.Len(t, after, 1)
	require.True(t, survivor.owns(after[0].Dispatcher))
	// The history tells the wait.
	var types []string
	for _, e := range api.events(id) {
		types = append(types, string(e.Type))
	}
	require.Subset(t, types, []string{"step.suspended", "step.resumed", "step.succeeded", "run.succeeded"})
}
