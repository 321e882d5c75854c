package testrun

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBundleCases runs the cases of the testdata bundles: a year's sleep
// beside a signal (yearly); a mocked http step with a sequence of outcomes
// retried on the virtual clock, a condition's skip, a real builtin's failure
// and a compensation (orders); maps and a rate limit (flows).
func TestBundleCases(t *testing.T) {
	t.Parallel()
	for _, dir := range []string{"testdata/yearly", "testdata/orders", "testdata/flows"} {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			t.Parallel()
			r := runnerFor(t, dir, nil)
			cases, err := LoadCases(dir)
			require.NoError(t, err)
			for _, c := range cases {
				res := r.Run(context.Background(), c)
				require.NoError(t, res.Err, c.Name)
				require.Empty(t, res.Failures, c.Name)
			}
		})
	}
}

// TestYearDeterministic runs the case of a year's sleep with a signal after
// 30 days 100 times (CAIRN_TEST_REPEAT other times) and checks that every run
// ends the same: statuses, attempts, outputs, virtual times. The wall time
// of each is logged, not asserted (make bench holds speed goals).
func TestYearDeterministic(t *testing.T) {
	t.Parallel()
	n := 100
	if v := os.Getenv("CAIRN_TEST_REPEAT"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		require.NoError(t, err)
	}
	r := runnerFor(t, "testdata/yearly", nil)
	data, err := os.ReadFile("testdata/yearly/tests/year.yaml")
	require.NoError(t, err)
	c, err := ParseCase(data, "year")
	require.NoError(t, err)
	// Four at a time, as cairn test runs cases: each on its own database and
	// dispatcher, so running them together must not change a result either.
	results := make([]string, n)
	errs := make([]error, n)
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			res := r.Run(context.Background(), c)
			if res.Err != nil || len(res.Failures) > 0 {
				errs[i] = fmt.Errorf("run %d: %v %v", i+1, res.Err, res.Failures)
				return
			}
			t.Logf("run %d: wall %s, virtual %s", i+1, res.Wall, Duration(res.Virtual))
			res.Run.ID = [16]byte{} // a new run each time
			b, err := json.Marshal(struct {
				Run      *RunSummary
				Virtual  Duration
				Handlers []string
			}{res.Run, Duration(res.Virtual), res.Handlers})
			results[i], errs[i] = string(b), err
		}()
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
		require.Equal(t, results[0], results[i], "run %d differs from the first", i+1)
	}
}

// TestScheduleFire: a case of a schedule's run waits, on the virtual clock,
// for the schedule's first fire after the start: 03:00 in Paris is 02:00 UTC
// on the 1st of January. The other schedule (every 5 minutes) never fires.
func TestScheduleFire(t *testing.T) {
	t.Parallel()
	r := runnerFor(t, "../examples/nightly", nil)
	c, err := ParseCase([]byte(`
schedule: report
start: 2030-01-01T00:00:00Z
expect:
  status: succeeded
  steps: {collect: succeeded, publish: succeeded}
`), "nightly report")
	require.NoError(t, err)
	res := r.Run(context.Background(), c)
	require.NoError(t, res.Err)
	require.Empty(t, res.Failures)
	require.Equal(t, 2*time.Hour, res.Virtual)

	c.Schedule = "weekly"
	res = r.Run(context.Background(), c)
	require.ErrorContains(t, res.Err, `nightly has no schedule "weekly"`)
}

// TestMapAndRateLimit: a map's instances (two at a time, mocked by the map
// step's key) and a map under a rate limit of one a minute: the clock jumps
// to each token, so the five paced instances take four to five virtual
// minutes (whether the bucket starts full is the rate limit's business).
func TestMapAndRateLimit(t *testing.T) {
	t.Parallel()
	r := runnerFor(t, "testdata/flows", nil)
	cases, err := LoadCases("testdata/flows")
	require.NoError(t, err)
	res := r.Run(context.Background(), cases[0])
	require.NoError(t, res.Err)
	require.Empty(t, res.Failures)
	require.GreaterOrEqual(t, res.Virtual, 4*time.Minute)
	require.LessOrEqual(t, res.Virtual, 5*time.Minute+time.Second)
	t.Logf("wall %s, virtual %s", res.Wall, res.Virtual)
}
