package catalog_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/internal/testenv"
)

// retryCounter counts the transactions the store ran again after a deadlock or a
// serialization failure (inTx logs each at debug level), and keeps their errors.
type retryCounter struct {
	n      atomic.Int64
	mu     sync.Mutex
	errors []string
}

func (c *retryCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c *retryCounter) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c *retryCounter) WithGroup(string) slog.Handler            { return c }
func (c *retryCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "retrying transaction" {
		return nil
	}
	c.n.Add(1)
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "error" {
			msg := a.Value.String()
			// PostgreSQL's detail of a deadlock names the statements that met.
			if err, ok := a.Value.Any().(error); ok {
				if pqErr := (*pq.Error)(nil); errors.As(err, &pqErr) && pqErr.Detail != "" {
					msg += " (" + pqErr.Detail + "; where: " + pqErr.Where + ")"
				}
			}
			c.mu.Lock()
			c.errors = append(c.errors, msg)
			c.mu.Unlock()
		}
		return true
	})
	return nil
}

// TestCancelWhileStepsFinish cancels a wide run while four dispatchers finish its
// steps in batches, as `cairn run cancel` on a large fan-out does. Cancel and the
// finishers take their locks in one order (the run's advisory lock, then steps,
// then the run's row), so neither waits for the other in a circle: no transaction
// is retried for a deadlock, the cancel succeeds, and
// no step is left active in a canceled run. Half of the finishers also lease the
// dependents they make ready (StepFinishClaim), in the same order.
func TestCancelWhileStepsFinish(t *testing.T) {
	t.Parallel()
	whileStepsFinish(t, func(ctx context.Context, s *catalog.Store, run *catalog.Run) {
		require.NoError(t, s.RunCancel(ctx, run.ID, "operator")) // its t steps never finish: the run cannot end first
	}, func(t *testing.T, ctx context.Context, s *catalog.Store, run *catalog.Run) {
		for key, st := range statuses(t, ctx, s, run.ID) {
			require.NotContains(t, []string{"waiting", "ready", "running", "suspended"}, st, "step %s", key)
		}
	})
}

// TestPauseWhileStepsFinish pauses and resumes a wide run while four dispatchers
// finish its steps in batches: pause and resume take the run's locks in the
// finishers' order too, so no transaction is retried for a deadlock, and the run
// is no longer paused, no step of it held. (Its dependents left ready are claimed
// by the next round's dispatchers, whose run may then not have started.)
func TestPauseWhileStepsFinish(t *testing.T) {
	t.Parallel()
	whileStepsFinish(t, func(ctx context.Context, s *catalog.Store, run *catalog.Run) {
		changed, err := s.RunPause(ctx, run.ID, "alice", "")
		require.NoError(t, err)
		require.True(t, changed)
		require.NoError(t, s.RunResume(ctx, run.ID, "alice", ""))
	}, func(t *testing.T, ctx context.Context, s *catalog.Store, run *catalog.Run) {
		var held int
		require.NoError(t, s.DB().GetContext(ctx, &held, `SELECT count(*) FROM steps WHERE run_id = $1 AND held`, run.ID))
		require.Zero(t, held)
		r, err := s.RunGet(ctx, run.ID)
		require.NoError(t, err)
		require.Contains(t, []catalog.RunStatus{catalog.RunPending, catalog.RunRunning}, r.Status)
	})
}

// whileStepsFinish runs control on a run of 240 pairs of steps (a leaf and its
// dependent) while four dispatchers finish the leaves in batches of 8, half of
// them leasing the dependents they make ready; three rounds, control a little
// later each time. check looks at the run after each round; no transaction may be
// retried.
func whileStepsFinish(t *testing.T, control func(context.Context, *catalog.Store, *catalog.Run),
	check func(*testing.T, context.Context, *catalog.Store, *catalog.Run)) {
	ctx := context.Background()
	counter := &retryCounter{}
	s := catalog.New(testenv.DB(t), &catalog.Config{Logger: slog.New(counter)})

	const width, dispatchers = 240, 4
	steps := make([]catalog.NewStep, 0, 2*width)
	for i := range width {
		// Each leaf has a dependent, so finishing a leaf locks a second step.
		steps = append(steps,
			catalog.NewStep{Key: fmt.Sprintf("s%03d", i), MaxAttempts: 1},
			catalog.NewStep{Key: fmt.Sprintf("t%03d", i), Needs: []string{fmt.Sprintf("s%03d", i)}, MaxAttempts: 1})
	}
	for round := range 3 {
		run := newRun(t, ctx, s, steps)
		claimed := make([][]catalog.Claimed, dispatchers)
		for d := range dispatchers {
			c, err := s.StepClaim(ctx, fmt.Sprintf("d%d", d), width/dispatchers, time.Minute)
			require.NoError(t, err)
			require.Len(t, c, width/dispatchers)
			claimed[d] = c
		}
		var g errgroup.Group
		start := make(chan struct{})
		for d := range dispatchers {
			g.Go(func() error {
				<-start
				c := claimed[d]
				rand.Shuffle(len(c), func(i, j int) { c[i], c[j] = c[j], c[i] })
				for len(c) > 0 {
					n := min(len(c), 8)
					batch := make([]*catalog.StepFinishParams, n)
					for i := range n {
						batch[i] = finishParams(c[i], catalog.OutcomeSucceeded, false, 0)
					}
					c = c[n:]
					// Half of the dispatchers lease the dependents their
					// finishes make ready, as a dispatcher with room does.
					var next *catalog.ClaimNext
					if d%2 == 1 {
						next = &catalog.ClaimNext{Owner: fmt.Sprintf("d%d", d), Limit: 8, TTL: time.Minute}
					}
					if _, _, err := s.StepFinishClaim(ctx, batch, next); err != nil {
						return err
					}
				}
				return nil
			})
		}
		close(start)
		time.Sleep(time.Duration(round+1) * 5 * time.Millisecond)
		control(ctx, s, run)
		require.NoError(t, g.Wait())
		check(t, ctx, s, run)
	}
	require.Zero(t, counter.n.Load(), "transactions retried: %s", strings.Join(counter.errors, "; "))
}
