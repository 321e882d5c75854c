package catalog_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/catalog/catalogtest"
	"github.com/cairnrun/cairn/internal/testenv"
)

// TestLockOrderStress runs every kind of writer of a run at once against one
// database for a few seconds: dispatchers that claim steps and finish them in
// batches (some failing), start child runs, sleep, wait for signals and
// approvals; a signaller and approver; the sweepers of waits, deadlines and queue
// timeouts; and operators who pause and resume runs and a workflow, cancel, retry
// and rerun parents and children. Every writer takes a
// run's locks in the one order of catalog/sql/run_control.sql, and no row that
// names a busy run share-locks it (migration 00051), so PostgreSQL detects no
// deadlock: the test counts them at the server (pg_stat_database.deadlocks of
// its database, read before and after), not the transactions the store retried.
func TestLockOrderStress(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newDeadlockWatch(t, 24)
	db, s := st.db, st.store
	kid := catalogtest.Version(t, s, "kid",
		catalog.NewStep{Key: "a", MaxAttempts: 1},
		catalog.NewStep{Key: "b", Needs: []string{"a"}, MaxAttempts: 1},
		catalog.NewStep{Key: "c", Needs: []string{"a"}, MaxAttempts: 1},
		catalog.NewStep{Key: "d", Needs: []string{"b", "c"}, MaxAttempts: 1, CompensateAttempts: 1}).Version
	steps := []catalog.NewStep{
		{Key: "call", MaxAttempts: 1},
		{Key: "sleep", MaxAttempts: 1},
		{Key: "signal", MaxAttempts: 1},
		{Key: "approve", MaxAttempts: 1},
	}
	for i := range 12 {
		steps = append(steps,
			catalog.NewStep{Key: fmt.Sprintf("s%02d", i), MaxAttempts: 2, CompensateAttempts: 1},
			catalog.NewStep{Key: fmt.Sprintf("t%02d", i), Needs: []string{fmt.Sprintf("s%02d", i)}, MaxAttempts: 1})
	}
	parent := catalogtest.Version(t, s, "par", steps...).Version

	work, stop := context.WithTimeout(ctx, 8*time.Second)
	defer stop()
	var (
		mu   sync.Mutex
		runs []uuid.UUID
		kids = map[uuid.UUID]bool{} // the child runs (and their reruns) among runs
	)
	addRun := func(id uuid.UUID, kid bool) {
		mu.Lock()
		runs = append(runs, id)
		kids[id] = kid
		mu.Unlock()
	}
	pickRun := func() (uuid.UUID, bool) {
		mu.Lock()
		defer mu.Unlock()
		if len(runs) == 0 {
			return uuid.Nil, false
		}
		return runs[len(runs)-1-rand.IntN(min(len(runs), 30))], true
	}
	// expected are the errors a writer may meet in this race: the run or step
	// moved on meanwhile. Any other error fails the test.
	expected := func(err error) error {
		if err == nil || work.Err() != nil || errors.Is(err, catalog.ErrConflict) ||
			errors.Is(err, catalog.ErrNotFound) || errors.Is(err, catalog.ErrLeaseLost) {
			return nil
		}
		return err
	}

	var g errgroup.Group
	g.Go(func() error { // runs arrive, one in five with a deadline soon
		for work.Err() == nil {
			p := &catalog.RunCreateParams{Workflow: "par", Version: parent}
			if rand.IntN(5) == 0 {
				d := time.Now().Add(time.Duration(300+rand.IntN(1500)) * time.Millisecond)
				p.Deadline = &d
			}
			run, _, err := s.RunCreate(work, p)
			if err := expected(err); err != nil {
				return fmt.Errorf("create: %w", err)
			}
			if err == nil {
				addRun(run.ID, false)
				// A short queue_timeout on a few of its steps (as flow: would set),
				// for the queue sweeper.
				_, err = db.ExecContext(work, `UPDATE steps SET queue_timeout_s = 0.02 WHERE run_id = $1 AND key IN ('s05', 't05')`, run.ID)
				if err := expected(err); err != nil {
					return fmt.Errorf("queue timeout: %w", err)
				}
			}
			time.Sleep(20 * time.Millisecond) // pacing, not a wait for a condition
		}
		return nil
	})
	for d := range 4 {
		owner := fmt.Sprintf("d%d", d)
		g.Go(func() error { return stressDispatch(work, s, owner, kid, addRun, expected) })
	}
	g.Go(func() error { // the sweepers of waits and deadlines
		for work.Err() == nil {
			_, err := s.WakeDue(work, 50)
			if err := expected(err); err != nil {
				return fmt.Errorf("wake due: %w", err)
			}
			_, err = s.RunDeadlines(work, 50)
			if err := expected(err); err != nil {
				return fmt.Errorf("deadlines: %w", err)
			}
			_, err = s.QueueTimeouts(work, 50)
			if err := expected(err); err != nil {
				return fmt.Errorf("queue timeouts: %w", err)
			}
			time.Sleep(5 * time.Millisecond)
		}
		return nil
	})
	g.Go(func() error { // signals for the steps that wait for one
		for work.Err() == nil {
			if id, ok := pickRun(); ok {
				_, err := s.SignalSend(work, &catalog.Signal{RunID: id, Name: "go", Actor: "sig", Payload: json.RawMessage(`{}`)})
				if err := expected(err); err != nil {
					return fmt.Errorf("signal: %w", err)
				}
				_, err = s.StepDecide(work, &catalog.StepDecision{RunID: id, Key: "approve", Approver: "ann", Role: "operator",
					Decision: catalog.DecisionApproved})
				if err := expected(err); err != nil {
					return fmt.Errorf("approve: %w", err)
				}
			}
			time.Sleep(3 * time.Millisecond)
		}
		return nil
	})
	for range 2 { // operators
		g.Go(func() error {
			for work.Err() == nil {
				id, ok := pickRun()
				if !ok {
					time.Sleep(time.Millisecond)
					continue
				}
				mu.Lock()
				kid := kids[id]
				mu.Unlock()
				var err error
				switch rand.IntN(7) {
				case 6:
					if _, err = s.WorkflowPause(work, "kid", "op", ""); err == nil {
						_, err = s.WorkflowResume(work, "kid", "op", "")
					}
				case 0, 1:
					if _, err = s.RunPause(work, id, "op", ""); err == nil {
						err = s.RunResume(work, id, "op", "")
					}
				case 2:
					err = s.RunCancel(work, id, "op")
				case 3, 4:
					_, _, err = s.RunRetry(work, &catalog.RunRetryParams{RunID: id, Actor: "op"})
				case 5:
					var run *catalog.Run
					from := "t03"
					if kid {
						from = "b"
					}
					run, _, _, err = s.RunRerun(work, &catalog.RunRerunParams{Source: id, FromStep: from, Actor: "op"})
					if err == nil {
						addRun(run.ID, kid)
					}
				}
				if err := expected(err); err != nil {
					return fmt.Errorf("operator on %s: %w", id, err)
				}
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())

	// Every parent step whose child run ended was resolved, at once or by the
	// wake sweeper (a child's end it found the parent busy for).
	for {
		n, err := s.WakeDue(ctx, 100)
		require.NoError(t, err)
		if n == 0 {
			break
		}
	}
	var waiting int
	require.NoError(t, db.GetContext(ctx, &waiting, `
SELECT count(*) FROM steps s JOIN runs c ON c.id = s.child_run
WHERE s.status = 'suspended' AND s.wait_kind = 'child_run' AND c.status IN ('succeeded', 'failed', 'canceled')`))
	require.Zero(t, waiting, "parent steps still waiting for a child run that ended")

	t.Logf("runs: %d", len(runs))
	st.requireNone(t)
}

// deadlockWatch is a store on a database of its own whose deadlocks a stress test
// counts at the server (pg_stat_database), not by the transactions it retried.
type deadlockWatch struct {
	db      *sqlx.DB
	store   *catalog.Store
	monitor *sqlx.DB
	counter *retryCounter
	before  int64
}

// newDeadlockWatch opens a fresh database with up to conns connections.
func newDeadlockWatch(t *testing.T, conns int) *deadlockWatch {
	t.Helper()
	dsn := testenv.DatabaseURL(t)
	db, err := sqlx.Open("postgres", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	db.SetMaxOpenConns(conns)
	monitor, err := sqlx.Open("postgres", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = monitor.Close() })
	monitor.SetMaxOpenConns(1)
	w := &deadlockWatch{db: db, monitor: monitor, counter: &retryCounter{}}
	w.before = serverDeadlocks(t, context.Background(), monitor)
	w.store = catalog.New(db, &catalog.Config{Logger: slog.New(w.counter)})
	return w
}

// requireNone closes the store and fails the test if PostgreSQL detected a
// deadlock in its database. The server counts a backend's deadlocks when it
// reports its statistics, at the latest when it exits: it waits until the store's
// backends are gone.
func (w *deadlockWatch) requireNone(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, w.store.Close())
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, w.monitor.GetContext(ctx, &n,
			`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`))
		return n == 0
	}, 30*time.Second, 20*time.Millisecond, "the store's backends exit")
	after := serverDeadlocks(t, ctx, w.monitor)
	t.Logf("transactions retried: %d; deadlocks detected by PostgreSQL: %d", w.counter.n.Load(), after-w.before)
	require.Zero(t, after-w.before, "deadlocks detected by PostgreSQL: %d (%v)", after-w.before, w.counter.errors)
}

// stressDispatch claims steps as a dispatcher does until ctx ends: call starts a
// child run of kid, sleep and signal suspend, the others finish in batches of up
// to 8 in the runtime's order (by run, then key; one in twenty fails), half of
// the batches leasing the dependents they make ready.
func stressDispatch(ctx context.Context, s *catalog.Store, owner string, kid int,
	addRun func(uuid.UUID, bool), expected func(error) error) error {
	var next []catalog.Claimed
	for ctx.Err() == nil {
		claimed := next
		next = nil
		if len(claimed) == 0 {
			c, err := s.StepClaim(ctx, owner, 16, time.Minute)
			if err := expected(err); err != nil {
				return fmt.Errorf("claim: %w", err)
			}
			claimed = c
		}
		if len(claimed) == 0 {
			time.Sleep(2 * time.Millisecond)
			continue
		}
		var batch []*catalog.StepFinishParams
		for _, c := range claimed {
			var err error
			switch c.Key {
			case "call":
				var res *catalog.ChildStartResult
				res, err = s.ChildStart(ctx, lease(c), &catalog.ChildStartParams{Workflow: "kid", Version: kid})
				if err == nil && !res.Reused && !res.Retried {
					addRun(res.Run, true)
				}
			case "sleep":
				err = s.StepSuspend(ctx, lease(c), catalog.Wait{Kind: catalog.WaitSleep,
					Until: time.Now().Add(time.Duration(rand.IntN(50)) * time.Millisecond)})
			case "signal":
				err = s.StepSuspend(ctx, lease(c), catalog.Wait{Kind: catalog.WaitSignal, Name: "go"})
			case "approve":
				err = s.ApprovalSuspend(ctx, lease(c), catalog.Approval{Required: 1, Roles: []string{"operator"}})
			default:
				outcome := catalog.OutcomeSucceeded
				if rand.IntN(20) == 0 {
					outcome = catalog.OutcomeFailed
				}
				batch = append(batch, finishParams(c, outcome, false, 0))
			}
			if err := expected(err); err != nil {
				return fmt.Errorf("%s/%s: %w", c.RunID, c.Key, err)
			}
		}
		// In the dispatchers' lock order (runtime's completer): by run, then key.
		slices.SortFunc(batch, func(a, b *catalog.StepFinishParams) int {
			if c := cmp.Compare(a.RunID.String(), b.RunID.String()); c != 0 {
				return c
			}
			return cmp.Compare(a.Key, b.Key)
		})
		for len(batch) > 0 {
			n := min(len(batch), 8)
			var claimNext *catalog.ClaimNext
			if rand.IntN(2) == 0 {
				claimNext = &catalog.ClaimNext{Owner: owner, Limit: 8, TTL: time.Minute}
			}
			_, more, err := s.StepFinishClaim(ctx, batch[:n], claimNext)
			if err := expected(err); err != nil {
				return fmt.Errorf("finish: %w", err)
			}
			next = append(next, more...)
			batch = batch[n:]
		}
	}
	return nil
}

// serverDeadlocks is PostgreSQL's count of the deadlocks it detected in the
// database db is connected to.
func serverDeadlocks(t *testing.T, ctx context.Context, db *sqlx.DB) int64 {
	t.Helper()
	var n int64
	_, err := db.ExecContext(ctx, `SELECT pg_stat_clear_snapshot()`)
	require.NoError(t, err)
	require.NoError(t, db.GetContext(ctx, &n,
		`SELECT coalesce(deadlocks, 0) FROM pg_stat_database WHERE datname = current_database()`))
	return n
}
