package client_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/client"
)

// followAll follows run id from after to its end, calling during for every event
// as it arrives, and returns the events.
func followAll(t *testing.T, tb *testBundle, id uuid.UUID, after int64, during func(*client.Event)) []client.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var got []client.Event
	err := tb.cl.FollowRun(ctx, id, after, func(ev *client.Event) error {
		got = append(got, *ev)
		if during != nil {
			during(ev)
		}
		return nil
	}, client.FollowOptions{MinBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond})
	require.NoError(t, err)
	return got
}

// requireHistory checks that got is the run's whole history after after, each
// event once and in order (as GET /v1/runs/{id}/events lists it), ending with the
// run's final event.
func requireHistory(t *testing.T, tb *testBundle, id uuid.UUID, after int64, got []client.Event) {
	t.Helper()
	var want []client.Event
	for ev, err := range tb.cl.Events(t.Context(), id, nil) {
		require.NoError(t, err)
		if ev.Seq > after {
			want = append(want, ev)
		}
	}
	require.NotEmpty(t, want)
	require.Equal(t, seqs(want), seqs(got), "each event once, in order, none missing")
	for i := range want {
		require.Equal(t, want[i].Type, got[i].Type, "event %d", want[i].Seq)
	}
	require.True(t, client.IsFinalEvent(got[len(got)-1].Type), "the last event is the run's final one, not %s", got[len(got)-1].Type)
}

func seqs(evs []client.Event) []int64 {
	out := make([]int64, len(evs))
	for i, ev := range evs {
		out[i] = ev.Seq
	}
	return out
}

// TestFollowRunAcrossServerRestart restarts the API server while a client follows a
// run: the server ends the stream (as at shutdown), is gone for a moment, and the
// client comes back with Last-Event-ID and gets the events made meanwhile.
func TestFollowRunAcrossServerRestart(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.deploy(t, chainManifest("chain", 5, 150*time.Millisecond))
	id := tb.start(t, "chain", nil)

	var restart sync.Once
	restarted := make(chan error, 1)
	tempDir := t.TempDir()
	got := followAll(t, tb, id, 0, func(ev *client.Event) {
		if ev.Seq == 3 {
			// In the background: the restart waits for the stream's handler to end,
			// which may wait for the client to read.
			restart.Do(func() { go func() { restarted <- tb.restart(tempDir) }() })
		}
	})
	require.NoError(t, <-restarted)
	requireHistory(t, tb, id, 0, got)

	streams := tb.requestsTo("/events/stream")
	require.GreaterOrEqual(t, len(streams), 2, "the stream was reopened")
	require.Empty(t, streams[0].lastEventID)
	for _, s := range streams[1:] {
		n, err := strconv.ParseInt(s.lastEventID, 10, 64)
		require.NoError(t, err, "a reopened stream sends Last-Event-ID")
		require.GreaterOrEqual(t, n, int64(3))
	}
}

// TestFollowRunAcrossKilledConnection breaks the connection in the middle of a
// stream, as a network failure does.
func TestFollowRunAcrossKilledConnection(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.deploy(t, chainManifest("chain", 5, 150*time.Millisecond))
	id := tb.start(t, "chain", nil)

	var kill sync.Once
	got := followAll(t, tb, id, 0, func(ev *client.Event) {
		if ev.Seq == 3 {
			kill.Do(tb.killConnections)
		}
	})
	requireHistory(t, tb, id, 0, got)
	streams := tb.requestsTo("/events/stream")
	require.GreaterOrEqual(t, len(streams), 2, "the stream was reopened")
	require.NotEmpty(t, streams[1].lastEventID)
}

// TestFollowRunEndedRun follows runs that have ended: the history is replayed from
// after, and following ends.
func TestFollowRunEndedRun(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.deploy(t, chainManifest("chain", 2, 10*time.Millisecond))
	id := tb.start(t, "chain", nil)
	run, err := tb.cl.WaitRun(t.Context(), id, client.WaitOptions{})
	require.NoError(t, err)
	require.Equal(t, client.RunStatusSucceeded, run.Status)

	all := followAll(t, tb, id, 0, nil)
	requireHistory(t, tb, id, 0, all)
	require.Len(t, all, int(run.Revision))

	tail := followAll(t, tb, id, 3, nil)
	requireHistory(t, tb, id, 3, tail)

	// After the final event there is nothing more to have.
	require.Empty(t, followAll(t, tb, id, run.Revision, nil))

	// An unknown run is a 404 at once.
	err = tb.cl.FollowRun(t.Context(), uuid.New(), 0, func(*client.Event) error { return nil }, client.FollowOptions{})
	require.Equal(t, "not_found", client.ProblemCode(err), "%v", err)
}

// TestFollowRunCallbackError stops following when the callback fails.
func TestFollowRunCallbackError(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.deploy(t, chainManifest("chain", 2, 10*time.Millisecond))
	id := tb.start(t, "chain", nil)
	stop := errors.New("seen enough")
	var got []int64
	err := tb.cl.FollowRun(t.Context(), id, 0, func(ev *client.Event) error {
		got = append(got, ev.Seq)
		if ev.Seq == 2 {
			return stop
		}
		return nil
	}, client.FollowOptions{})
	require.ErrorIs(t, err, stop)
	require.Equal(t, []int64{1, 2}, got)
	require.Len(t, tb.requestsTo("/events/stream"), 1)
	require.True(t, slices.IsSorted(got))
}
