package runtime_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/expr"
	"github.com/cairnrun/cairn/runtime"
)

// TestSleepHoldsNoSlot: sleeping steps are suspended at once, so a dispatcher with one
// slot runs other work while many runs sleep, and wakes each on time.
func TestSleepHoldsNoSlot(t *testing.T) {
	t.Parallel()
	_, tb := setup(t)
	startDispatcher(t, tb, runtime.Config{Concurrency: 1})
	sleepy := deploy(t, tb, map[string]string{"cairn.yaml": `
name: sleepy
steps:
  - {key: nap, sleep: 3s}
  - {key: after, needs: [nap], builtin: echo, with: {value: awake}}
`})
	quick := deploy(t, tb, map[string]string{"cairn.yaml": `
name: quick
steps:
  - {key: a, builtin: noop}
`})
	var sleepers []uuid.UUID
	for range 5 {
		sleepers = append(sleepers, startRun(t, tb, sleepy, ""))
	}
	for _, id := range sleepers {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Equal(c, catalog.StepSuspended, stepMap(c, tb, id)["nap"].Status)
		}, 10*time.Second, 10*time.Millisecond)
	}
	// While they sleep, the one slot is free for other runs: they finish before any
	// sleep ends.
	var quickDone []time.Time
	for range 3 {
		id := startRun(t, tb, quick, "")
		run := waitRun(t, tb, id, 10*time.Second)
		require.Equal(t, catalog.RunSucceeded, run.Status)
		quickDone = append(quickDone, *run.FinishedAt)
	}
	for _, id := range sleepers {
		run := waitRun(t, tb, id, 20*time.Second)
		require.Equal(t, catalog.RunSucceeded, run.Status)
		steps := stepMap(t, tb, run.ID)
		nap := steps["nap"]
		for _, done := range quickDone {
			require.True(t, done.Before(*nap.WaitUntil), "a quick run finished while the sleepers slept")
		}
		var out struct {
			SleptUntil time.Time `json:"slept_until"`
		}
		require.NoError(t, json.Unmarshal(nap.Output, &out))
		require.True(t, out.SleptUntil.Equal(*nap.WaitUntil))
		require.Equal(t, 3*time.Second, nap.WaitUntil.Sub(*nap.StartedAt).Round(time.Second), "2s from the claim")
		require.False(t, nap.FinishedAt.Before(out.SleptUntil), "woken at its time, not before")
		require.JSONEq(t, `"awake"`, string(steps["after"].Output))
		require.Len(t, attempts(t, tb, id, "nap"), 1, "no function ran: one attempt, which started the wait")
	}
}

// TestSleepUntil: sleep.until is evaluated when the step is ready; a failing
// expression fails the step with code expression.
func TestSleepUntil(t *testing.T) {
	t.Parallel()
	_, tb := setup(t)
	startDispatcher(t, tb, runtime.Config{})
	v := deploy(t, tb, map[string]string{"cairn.yaml": `
name: until
steps:
  - {key: nap, sleep: {until: "input.at"}}
`})
	labeled := deploy(t, tb, map[string]string{"cairn.yaml": `
name: until-label
steps:
  - {key: nap, sleep: {until: "labels.at"}}
`})
	at := time.Now().Add(time.Second).UTC().Truncate(time.Millisecond)
	id := startRun(t, tb, v, `{"at": "`+at.Format(time.RFC3339Nano)+`"}`)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		st := stepMap(c, tb, id)["nap"]
		assert.Equal(c, catalog.StepSuspended, st.Status)
		if assert.NotNil(c, st.WaitUntil) {
			assert.True(c, at.Equal(*st.WaitUntil))
		}
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, catalog.RunSucceeded, waitRun(t, tb, id, 10*time.Second).Status)

	at = time.Now().Add(500 * time.Millisecond).UTC().Truncate(time.Millisecond)
	run, _, err := tb.store.RunCreate(t.Context(), &catalog.RunCreateParams{Workflow: labeled.Workflow, Version: labeled.Version,
		Labels: catalog.Labels{"at": at.Format(time.RFC3339Nano)}})
	require.NoError(t, err)
	require.Equal(t, catalog.RunSucceeded, waitRun(t, tb, run.ID, 10*time.Second).Status)
	require.True(t, at.Equal(*stepMap(t, tb, run.ID)["nap"].WaitUntil), "until from the run's labels")

	bad := startRun(t, tb, v, `{"at": "tomorrow"}`)
	require.Equal(t, catalog.RunFailed, waitRun(t, tb, bad, 10*time.Second).Status)
	var e map[string]any
	require.NoError(t, json.Unmarshal(stepMap(t, tb, bad)["nap"].LastError, &e))
	require.Equal(t, expr.Code, e["code"])
	require.Contains(t, e["message"], "RFC 3339")
}

// TestSignalTimeout: a signal step times out on time: on_timeout fail fails the step
// (code timeout) and the run; continue succeeds with a null output.
func TestSignalTimeout(t *testing.T) {
	t.Parallel()
	_, tb := setup(t)
	startDispatcher(t, tb, runtime.Config{})
	v := deploy(t, tb, map[string]string{"cairn.yaml": `
name: timeouts
steps:
  - {key: strict, signal: {name: paid, timeout: 1s}}
  - {key: lenient, signal: {name: maybe, timeout: 1s, on_timeout: continue}}
  - {key: after, needs: [lenient], builtin: noop}
`})
	id := startRun(t, tb, v, "")
	run := waitRun(t, tb, id, 15*time.Second)
	require.Equal(t, catalog.RunFailed, run.Status)
	steps := stepMap(t, tb, id)
	require.Equal(t, catalog.StepFailed, steps["strict"].Status)
	var e map[string]any
	require.NoError(t, json.Unmarshal(steps["strict"].LastError, &e))
	require.Equal(t, catalog.ErrorCodeTimeout, e["code"])
	require.Equal(t, catalog.StepSucceeded, steps["lenient"].Status)
	require.Empty(t, steps["lenient"].Output)
	require.Equal(t, catalog.StepSucceeded, steps["after"].Status)
	require.False(t, steps["strict"].FinishedAt.Before(*steps["strict"].TimeoutAt), "not before its timeout")
}
