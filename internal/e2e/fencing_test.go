package e2e

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/client"
	"github.com/cairnrun/cairn/functions"
)

// TestStaleDispatcherIsFenced: a dispatcher frozen (SIGSTOP) past its lease while it
// runs a step. Another dispatcher sweeps the lease and runs the step again; when the
// frozen one wakes, its writes carry the old fencing token and are rejected: the
// step ends with exactly one successful attempt, the new one. The same fencing
// holds for a checkpoint sent through the API with the old attempt's credential.
func TestStaleDispatcherIsFenced(t *testing.T) {
	t.Parallel()
	st := newStack(t, stackOptions{})
	const ttl = 2 * time.Second
	const work = 4 * time.Second
	a := st.start(serverOptions{name: "a", leaseTTL: ttl})
	api := a.api()
	api.deploy(map[string]string{"cairn.yaml": `name: fencing
steps:
  - key: slow
    builtin: sleep
    with: {duration: ` + work.String() + `}
    retry: {max_attempts: 2, delay: 100ms}
`})
	runID := api.startRun("fencing", 0, nil)

	// Wait until A holds the step.
	api.waitStep(runID, "slow", 10*time.Second, "running on a", func(s client.Step) bool {
		return s.Status == client.StepStatusRunning && s.LeaseOwner != nil && a.owns(*s.LeaseOwner)
	})
	a.freeze()
	t.Cleanup(a.thaw) // a frozen process cannot be reaped

	b := st.start(serverOptions{name: "b", leaseTTL: ttl})
	apiB := b.api()

	// Wait until B's sweeper has interrupted A's attempt and B runs attempt 2.
	var attempts []client.Attempt
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		as, err := apiB.attempts(runID, "slow")
		require.NoError(c, err)
		require.GreaterOrEqual(c, len(as), 2, "attempts")
		attempts = as
		assert.Equal(c, client.AttemptStatusRunning, as[1].Status)
	}, 15*time.Second, 20*time.Millisecond, "no second attempt after A's lease expired")
	require.Equal(t, client.AttemptStatusInterrupted, attempts[0].Status)
	require.True(t, a.owns(attempts[0].Dispatcher))
	require.True(t, b.owns(attempts[1].Dispatcher))

	// The API path: a checkpoint with attempt 1's credential is refused and not
	// stored; one with attempt 2's credential is accepted (so the refusal is the
	// fencing, not a bad signature).
	checkpoint := func(token int64, value any) error {
		auth := "Bearer " + functions.LeaseCredential([]byte(signingKey), runID, "slow", token)
		ctx, cancel := withTimeout(30 * time.Second)
		defer cancel()
		_, err := apiB.cl.PutCheckpointWithResponse(ctx, apiB.runID(runID), "slow", &client.PutCheckpointParams{Authorization: &auth}, value)
		return err
	}
	var stale *client.Problem
	require.ErrorAs(t, checkpoint(attempts[0].LeaseToken, map[string]string{"from": "attempt 1"}), &stale, "stale checkpoint")
	require.EqualValues(t, http.StatusConflict, stale.Status, "stale checkpoint: %v", stale)
	require.Nil(t, apiB.mustStep(runID, "slow").Checkpoint, "a fenced checkpoint was stored")
	require.NoError(t, checkpoint(attempts[1].LeaseToken, map[string]string{"from": "attempt 2"}), "current checkpoint")
	require.JSONEq(t, `{"from": "attempt 2"}`, string(jsonOf(apiB.mustStep(runID, "slow").Checkpoint)))
	rejected, _ := b.metric("cairn_api_lease_lost_total")
	require.Equal(t, 1.0, rejected)

	// Keep A frozen until its own sleep is over, so that when it wakes its attempt
	// has finished on its side too and it tries to report it.
	time.Sleep(time.Until(attempts[0].StartedAt.Add(work + 500*time.Millisecond))) // a freeze of a set length
	a.thaw()

	// Wait until A, awake, has noticed: its completion or its heartbeat was refused.
	var lost float64
	var series []string
	require.Eventually(t, func() bool {
		lost, series = a.metric("cairn_lease_lost_total")
		return lost > 0
	}, 10*time.Second, 50*time.Millisecond, "server a never counted a lost lease")
	t.Logf("server a after SIGCONT: %v", series)

	run := apiB.waitRun(runID, 20*time.Second)
	require.Equal(t, client.RunStatusSucceeded, run.Status)
	attempts = apiB.mustAttempts(runID, "slow")
	require.Equal(t, []string{"interrupted", "succeeded"}, attemptStatuses(attempts),
		"A's late completion must not overwrite anything")
	require.True(t, b.owns(attempts[1].Dispatcher))

	succeeded, retried := 0, false
	for _, e := range apiB.events(runID) {
		switch e.Type {
		case "step.succeeded":
			succeeded++
			require.EqualValues(t, 2, deref(e.Attempt))
		case "step.retrying":
			var d struct {
				AttemptStatus string `json:"attempt_status"`
			}
			require.NoError(t, json.Unmarshal(jsonOf(e.Data), &d))
			retried = retried || (deref(e.Attempt) == 1 && d.AttemptStatus == "interrupted")
		}
	}
	require.Equal(t, 1, succeeded, "exactly one successful attempt")
	require.True(t, retried)
	// A is alive and well after all.
	require.Equal(t, http.StatusOK, a.readyz())
}
