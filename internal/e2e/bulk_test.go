package e2e

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/client"
)

// bulkRuns is how many runs TestBulkRetrySurvivesKill retries (the figure);
// CAIRN_BULK_RUNS changes it.
func bulkRuns(t *testing.T) int {
	n := 2000
	if v := os.Getenv("CAIRN_BULK_RUNS"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		require.NoError(t, err, "CAIRN_BULK_RUNS")
	}
	return n
}

// TestBulkRetrySurvivesKill: a bulk retry of 2,000 failed runs; the
// server working it is killed (SIGKILL) mid-way and another started: the operation
// finishes, and every run was retried exactly once (one run.retried event each,
// one applied record each).
func TestBulkRetrySurvivesKill(t *testing.T) {
	t.Parallel()
	n := bulkRuns(t)
	st := newStack(t, stackOptions{})
	s1 := st.start(serverOptions{name: "s1"})
	api := s1.api()
	api.deploy(map[string]string{"cairn.yaml": "name: doomed\nsteps:\n  - {key: only, builtin: fail}\n"})

	ids := make([]string, n)
	var g errgroup.Group
	g.SetLimit(8)
	for i := range n {
		g.Go(func() error {
			id, err := api.tryStartRun("doomed", 0, nil)
			ids[i] = id
			return err
		})
	}
	require.NoError(t, g.Wait())
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		failed, err := api.countRuns("doomed", client.RunStatusFailed)
		require.NoError(c, err)
		require.Equal(c, n, failed)
	}, 3*time.Minute, 200*time.Millisecond, "every run fails first")

	// The requests' context outlasts the waits below (a minute for the operation
	// to start, two for it to finish): with one minute in all, a loaded machine
	// ended it while the new server was still working (context deadline exceeded).
	ctx, cancel := withTimeout(4 * time.Minute)
	defer cancel()
	workflow, failed := "doomed", client.RunFilterParamsStatusFailed
	resp, err := api.cl.BulkRunsWithResponse(ctx, client.BulkRunsJSONRequestBody{
		Action: client.BulkBodyActionRetry, Filter: client.RunFilterParams{Workflow: &workflow, Status: &failed},
	})
	require.NoError(t, err)
	require.NotNil(t, resp.JSON202, "status %d: %s", resp.StatusCode(), resp.Body)
	op := *resp.JSON202
	require.EqualValues(t, n, op.Total)
	opID := uuid.MustParse(op.Id)

	// Kill the server once it is part-way through.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, err := api.cl.GetOperationWithResponse(ctx, opID)
		require.NoError(c, err)
		require.NotNil(c, got.JSON200)
		op = *got.JSON200
		require.Positive(c, op.Processed)
	}, time.Minute, 5*time.Millisecond, "the operation starts")
	s1.kill()
	require.Less(t, op.Processed, op.Total, "killed before the operation ended (raise CAIRN_BULK_RUNS)")
	t.Logf("killed at %d/%d runs processed", op.Processed, op.Total)

	s2 := st.start(serverOptions{name: "s2"})
	api = s2.api()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, err := api.cl.GetOperationWithResponse(ctx, opID)
		require.NoError(c, err)
		require.NotNil(c, got.JSON200)
		op = *got.JSON200
		require.Equal(c, client.OperationStatusSucceeded, op.Status)
	}, 2*time.Minute, 100*time.Millisecond, "the operation finishes on the new server")
	require.EqualValues(t, n, op.Processed)
	require.EqualValues(t, n, op.Applied)
	require.Zero(t, op.Skipped)

	retried := make([]int, n)
	g = errgroup.Group{}
	g.SetLimit(8)
	for i, id := range ids {
		g.Go(func() error {
			events, err := api.tryEvents(id)
			for _, e := range events {
				if e.Type == string(catalog.EventRunRetried) {
					retried[i]++
				}
			}
			return err
		})
	}
	require.NoError(t, g.Wait())
	for i, c := range retried {
		require.Equal(t, 1, c, "run %s retried %d times", ids[i], c)
	}
}
