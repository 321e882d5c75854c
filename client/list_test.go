package client_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/client"
)

// collect drains an iterator, failing on its error.
func collect[T any](t *testing.T, seq func(func(T, error) bool)) []T {
	t.Helper()
	var out []T
	for v, err := range seq {
		require.NoError(t, err)
		out = append(out, v)
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// TestListIterators pages through every paginated list with pages of two.
func TestListIterators(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	for _, name := range []string{"wf-c", "wf-a", "wf-b"} {
		tb.deploy(t, fmt.Sprintf("name: %s\nsteps:\n  - key: a\n    builtin: noop\n", name))
	}
	for i := range 3 { // three versions of wf-a
		tb.deploy(t, fmt.Sprintf("name: wf-a\ndescription: version %d\nsteps:\n  - key: a\n    builtin: noop\n", i+2))
	}
	var started []uuid.UUID // oldest first
	for range 5 {
		started = append(started, tb.start(t, "wf-a", nil))
	}
	other := tb.start(t, "wf-b", nil)
	for _, id := range append(slices.Clone(started), other) {
		run, err := tb.cl.WaitRun(t.Context(), id, client.WaitOptions{})
		require.NoError(t, err)
		require.Equal(t, client.RunStatusSucceeded, run.Status)
	}
	two := ptr(int64(2))

	t.Run("workflows", func(t *testing.T) {
		t.Parallel()
		var names []string
		for _, w := range collect(t, tb.cl.Workflows(t.Context(), &client.ListWorkflowsParams{Limit: two})) {
			names = append(names, w.Name)
		}
		require.Equal(t, []string{"wf-a", "wf-b", "wf-c"}, names)
	})

	t.Run("versions", func(t *testing.T) {
		t.Parallel()
		var versions []int64
		for _, v := range collect(t, tb.cl.Versions(t.Context(), "wf-a", &client.ListVersionsParams{Limit: two})) {
			versions = append(versions, v.Version)
		}
		require.Equal(t, []int64{4, 3, 2, 1}, versions)

		// A list the server refuses yields its error once, and ends.
		var errs int
		for _, err := range tb.cl.Versions(t.Context(), "no-such-workflow", nil) {
			require.Equal(t, "not_found", client.ProblemCode(err), "%v", err)
			errs++
		}
		require.Equal(t, 1, errs)
	})

	t.Run("runs with filters", func(t *testing.T) {
		t.Parallel()
		before := len(tb.requestsTo("/v1/runs"))
		var ids []uuid.UUID
		p := &client.ListRunsParams{Workflow: ptr("wf-a"), Status: ptr(client.ListRunsParamsStatusSucceeded), Limit: two}
		for _, r := range collect(t, tb.cl.Runs(t.Context(), p)) {
			ids = append(ids, uuid.MustParse(r.Id))
		}
		want := slices.Clone(started)
		slices.Reverse(want) // newest first
		require.Equal(t, want, ids)
		require.Len(t, tb.requestsTo("/v1/runs"), before+3, "three pages of two")
		require.Nil(t, p.Cursor, "the params are not changed")

		var pages int
		for page, err := range tb.cl.RunPages(t.Context(), p) {
			require.NoError(t, err)
			require.NotNil(t, page.JSON200)
			require.NotEmpty(t, page.Body, "the raw answer")
			pages++
		}
		require.Equal(t, 3, pages)

		// Breaking out of the loop fetches no more pages.
		before = len(tb.requestsTo("/v1/runs"))
		n := 0
		for _, err := range tb.cl.Runs(t.Context(), p) {
			require.NoError(t, err)
			if n++; n == 3 {
				break
			}
		}
		require.Len(t, tb.requestsTo("/v1/runs"), before+2)

		none := collect(t, tb.cl.Runs(t.Context(), &client.ListRunsParams{Status: ptr(client.ListRunsParamsStatusFailed)}))
		require.Empty(t, none)
	})

	t.Run("events", func(t *testing.T) {
		t.Parallel()
		events := collect(t, tb.cl.Events(t.Context(), started[0], &client.ListEventsParams{Limit: two}))
		require.GreaterOrEqual(t, len(events), 4, "run.created, step.started, step.succeeded, run.succeeded")
		for i, ev := range events {
			require.Equal(t, int64(i+1), ev.Seq)
		}
		require.Equal(t, "run.created", events[0].Type)
		require.Equal(t, "run.succeeded", events[len(events)-1].Type)
	})
}

// TestListIteratorsHonourContext: an iterator whose ctx has ended yields its error.
func TestListIteratorsHonourContext(t *testing.T) {
	t.Parallel()
	cl, err := client.New("http://127.0.0.1:1", "token")
	require.NoError(t, err)
	ctx, cancel := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer cancel()
	var errs int
	for _, err := range cl.Workflows(ctx, nil) {
		require.Error(t, err)
		errs++
	}
	require.Equal(t, 1, errs)
}
