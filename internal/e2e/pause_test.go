package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/client"
	cairnruntime "github.com/cairnrun/cairn/runtime"
)

// TestPauseStopsAWideRun: a run of 1,000 short steps is
// paused mid-way through the real binary; no attempt starts later than the pause's
// answer plus one poll interval (the attempts' started_at, through the API), the
// steps that were running finish; resumed, the run succeeds.
func TestPauseStopsAWideRun(t *testing.T) {
	t.Parallel()
	st := newStack(t, stackOptions{})
	s := st.start(serverOptions{})
	c := s.api()

	const width = 999
	var m strings.Builder
	m.WriteString("name: wide\nsteps:\n  - {key: root, builtin: noop}\n")
	for i := range width {
		fmt.Fprintf(&m, "  - {key: s%03d, needs: [root], builtin: sleep, with: {duration: 20ms}}\n", i)
	}
	c.deploy(map[string]string{"cairn.yaml": m.String()})
	id := c.startRun("wide", 0, nil)
	uid := c.runID(id)

	// Mid-way: some of the fan-out has succeeded.
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		r, err := c.run(id)
		require.NoError(ct, err)
		assert.Less(ct, r.StepsRemaining, int64(width+1)-50)
	}, time.Minute, 20*time.Millisecond, "waiting for 50 steps to finish")
	// The pause and the resume below share it: it outlasts the minute of waiting
	// between them.
	ctx, cancel := withTimeout(3 * time.Minute)
	defer cancel()
	paused, err := c.cl.PauseRunWithResponse(ctx, uid, client.ControlBody{})
	require.NoError(t, err)
	pausedAt := time.Now()
	require.Equal(t, client.RunStatusPaused, paused.JSON200.Status)

	// The attempts running at the pause finish; then nothing moves.
	var held int
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		steps, err := c.steps(id)
		require.NoError(ct, err)
		held = 0
		for _, step := range steps {
			assert.NotEqual(ct, client.StepStatusRunning, step.Status, "step %s still running", step.Key)
			if step.BlockedBy != nil && step.BlockedBy.Kind == client.BlockedByKindPaused {
				held++
			}
		}
	}, time.Minute, 50*time.Millisecond, "waiting for the running attempts to finish")
	require.Positive(t, held, "the run was paused mid-way: some steps wait, blocked_by paused")
	// Keep the run paused for two poll intervals (the server's default; cairn
	// serve has no setting for it): the check of the attempts' starts below needs
	// a window longer than the allowance. Not an assertion by itself.
	time.Sleep(2 * cairnruntime.DefaultPollInterval)
	r, err := c.run(id)
	require.NoError(t, err)
	require.Equal(t, client.RunStatusPaused, r.Status)
	require.Equal(t, held, int(r.StepsRemaining), "nothing finished while paused after the running attempts")

	resumeAt := time.Now()
	resumed, err := c.cl.ResumeRunWithResponse(ctx, uid, client.ControlBody{})
	require.NoError(t, err)
	require.Equal(t, client.RunStatusRunning, resumed.JSON200.Status)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		r, err := c.run(id)
		require.NoError(ct, err)
		assert.Equal(ct, client.RunStatusSucceeded, r.Status)
	}, 2*time.Minute, 50*time.Millisecond, "waiting for the resumed run to succeed")

	// Every attempt started before the pause's answer plus one poll interval, or
	// after the resume.
	limit := pausedAt.Add(cairnruntime.DefaultPollInterval)
	before, after := 0, 0
	for _, step := range c.mustSteps(id) {
		attempts, err := c.attempts(id, step.Key)
		require.NoError(t, err)
		require.Len(t, attempts, 1, "step %s", step.Key)
		a := attempts[0]
		switch {
		case !a.StartedAt.After(limit):
			before++
		case !a.StartedAt.Before(resumeAt):
			after++
		default:
			t.Fatalf("step %s: its attempt started at %s, after the pause answered (%s) plus a poll interval and before the resume (%s)",
				step.Key, a.StartedAt, pausedAt, resumeAt)
		}
	}
	require.Equal(t, width+1, before+after)
	require.Equal(t, held, after)
}

// TestOnExhaustedPauseParksTheRun: a step whose retry policy says
// on_exhausted: pause uses up its attempts; instead of failing, the run is paused
// (exhausted) with the step parked; the operator fixes the cause and resumes; the
// step runs again and the run succeeds.
func TestOnExhaustedPauseParksTheRun(t *testing.T) {
	t.Parallel()
	st := newStack(t, stackOptions{})
	s := st.start(serverOptions{})
	c := s.api()
	fix := filepath.Join(t.TempDir(), "fixed")
	c.deploy(map[string]string{
		"cairn.yaml": `name: parks
steps:
  - key: fragile
    exec: [bin/fragile]
    retry: {max_attempts: 2, delay: 0s, on_exhausted: pause}
  - {key: after, needs: [fragile], builtin: noop}
`,
		"bin/fragile": "#!/bin/sh\ncat >/dev/null\nif [ ! -f " + fix + " ]; then echo 'not fixed yet' >&2; exit 3; fi\necho '{\"ok\":true}'\n",
	})
	id := c.startRun("parks", 0, nil)

	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		r, err := c.run(id)
		require.NoError(ct, err)
		assert.Equal(ct, client.RunStatusPaused, r.Status)
	}, time.Minute, 50*time.Millisecond, "waiting for the run to park")
	r, err := c.run(id)
	require.NoError(t, err)
	require.Equal(t, client.RunPauseReasonExhausted, deref(r.PauseReason))
	step := c.mustStep(id, "fragile")
	require.Equal(t, client.StepStatusReady, step.Status)
	require.Equal(t, client.BlockedByKindPaused, step.BlockedBy.Kind)
	attempts, err := c.attempts(id, "fragile")
	require.NoError(t, err)
	require.Len(t, attempts, 2, "both attempts were used")

	require.NoError(t, os.WriteFile(fix, nil, 0o644))
	ctx, cancel := withTimeout(30 * time.Second)
	defer cancel()
	_, err = c.cl.ResumeRunWithResponse(ctx, c.runID(id), client.ControlBody{})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		r, err := c.run(id)
		require.NoError(ct, err)
		assert.Equal(ct, client.RunStatusSucceeded, r.Status)
	}, time.Minute, 50*time.Millisecond, "waiting for the resumed run to succeed")
	attempts, err = c.attempts(id, "fragile")
	require.NoError(t, err)
	require.Len(t, attempts, 3, "one more attempt, after the resume")
}
