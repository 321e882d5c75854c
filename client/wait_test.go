package client_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/client"
)

func TestWaitRun(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.deploy(t, chainManifest("chain", 3, 100*time.Millisecond))
	tb.deploy(t, `name: always-fails
steps:
  - key: boom
    builtin: fail
    retry: {max_attempts: 1}
    with: {retryable: false, message: "boom on purpose"}
`)
	tb.deploy(t, `name: slow
steps:
  - key: nap
    builtin: sleep
    with: {duration: 1h}
`)

	t.Run("succeeds", func(t *testing.T) {
		t.Parallel()
		id := tb.start(t, "chain", map[string]any{"n": 1})
		run, err := tb.cl.WaitRun(t.Context(), id, client.WaitOptions{})
		require.NoError(t, err)
		require.Equal(t, id.String(), run.Id)
		require.Equal(t, client.RunStatusSucceeded, run.Status)
		require.NotNil(t, run.FinishedAt)
		require.Zero(t, run.StepsRemaining)
		require.Nil(t, run.Error)
	})

	t.Run("fails", func(t *testing.T) {
		t.Parallel()
		id := tb.start(t, "always-fails", nil)
		run, err := tb.cl.WaitRun(t.Context(), id, client.WaitOptions{})
		require.NoError(t, err, "a failed run is not an error of the wait")
		require.Equal(t, client.RunStatusFailed, run.Status)
		require.Contains(t, errorText(run.Error), "boom")
	})

	t.Run("already ended", func(t *testing.T) {
		t.Parallel()
		id := tb.start(t, "always-fails", nil)
		_, err := tb.cl.WaitRun(t.Context(), id, client.WaitOptions{})
		require.NoError(t, err)
		before := len(tb.requestsTo(id.String() + "/events/stream"))
		run, err := tb.cl.WaitRun(t.Context(), id, client.WaitOptions{})
		require.NoError(t, err)
		require.Equal(t, client.RunStatusFailed, run.Status)
		require.Len(t, tb.requestsTo(id.String()+"/events/stream"), before, "no stream for a run that has ended")
	})

	t.Run("ctx ends first", func(t *testing.T) {
		t.Parallel()
		id := tb.start(t, "slow", nil)
		t.Cleanup(func() {
			_, err := tb.cl.CancelRunWithResponse(context.Background(), id, client.CancelRunRequest{})
			require.NoError(t, err)
		})
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		_, err := tb.cl.WaitRun(ctx, id, client.WaitOptions{})
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})

	t.Run("unknown run", func(t *testing.T) {
		t.Parallel()
		_, err := tb.cl.WaitRun(t.Context(), uuid.New(), client.WaitOptions{})
		require.Equal(t, "not_found", client.ProblemCode(err), "%v", err)
	})
}

// TestWaitRunPollsWhenStreamRefused has the server refuse the event stream (a 503
// with Retry-After, as at its maximum of streams): WaitRun polls the run instead.
func TestWaitRunPollsWhenStreamRefused(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.deploy(t, chainManifest("chain", 2, 100*time.Millisecond))
	tb.refuse(1000)
	id := tb.start(t, "chain", nil)
	run, err := tb.cl.WaitRun(t.Context(), id, client.WaitOptions{PollInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	require.Equal(t, client.RunStatusSucceeded, run.Status)
	require.Len(t, tb.requestsTo("/events/stream"), 1, "one refusal, then polling")
	require.GreaterOrEqual(t, len(tb.requestsTo("/v1/runs/"+id.String())), 2)
}

// TestWaitRunPollsAtStreamCap: a server with its one event stream taken refuses
// another (503, Retry-After: 10); WaitRun polls rather than wait that long.
func TestWaitRunPollsAtStreamCap(t *testing.T) {
	t.Parallel()
	tb := setup(t, func(cfg *api.Config) { cfg.MaxStreams = 1 })
	tb.deploy(t, chainManifest("chain", 2, 100*time.Millisecond))
	tb.deploy(t, "name: slow\nsteps:\n  - key: nap\n    builtin: sleep\n    with: {duration: 1h}\n")

	// Take the one stream, following a run that will not end.
	slow := tb.start(t, "slow", nil)
	t.Cleanup(func() {
		_, err := tb.cl.CancelRunWithResponse(context.Background(), slow, client.CancelRunRequest{})
		require.NoError(t, err)
	})
	holder, err := tb.cl.StreamEvents(t.Context(), slow, nil)
	require.NoError(t, err)
	defer holder.Body.Close()

	id := tb.start(t, "chain", nil)
	start := time.Now()
	run, err := tb.cl.WaitRun(t.Context(), id, client.WaitOptions{PollInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	require.Equal(t, client.RunStatusSucceeded, run.Status)
	require.Less(t, time.Since(start), 10*time.Second, "polled, not waited for Retry-After")
	streams := tb.requestsTo(id.String() + "/events/stream")
	require.Len(t, streams, 1, "one refusal, then polling")
	require.Equal(t, http.StatusServiceUnavailable, streams[0].status.Status())
}

// TestFollowRunRetriesRefusedStream has the server refuse the stream twice with a
// 503 and Retry-After: 1; FollowRun waits as asked and then follows the run.
func TestFollowRunRetriesRefusedStream(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.deploy(t, chainManifest("chain", 2, 10*time.Millisecond))
	tb.refuse(2)
	id := tb.start(t, "chain", nil)
	start := time.Now()
	got := followAll(t, tb, id, 0, nil)
	requireHistory(t, tb, id, 0, got)
	require.GreaterOrEqual(t, time.Since(start), 2*time.Second, "Retry-After: 1, twice")
	require.Len(t, tb.requestsTo("/events/stream"), 3)
}

// errorText is a run's error as text: its message, or "".
func errorText(v any) string {
	if m, ok := v.(map[string]any); ok {
		if s, ok := m["message"].(string); ok {
			return s
		}
	}
	s, _ := v.(string)
	return s
}
