package runtime_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/runtime"
)

// TestFinishLeasesTheNextStep: a dispatcher with a free slot leases the step that
// a success makes ready in the transaction that records the success (the lease in
// the finish, catalog.StepFinishClaim), and starts it at once; the events then
// show it: a step's step.succeeded and the next step's step.started carry one
// transaction's time (for most steps: see inFinish). With a single slot, which
// an attempt gives back when its handler returns (before its outcome is
// written), the claim loop and the finish race for it: either may start the
// next step, never both (one attempt a step), and the chain runs through.
func TestFinishLeasesTheNextStep(t *testing.T) {
	const steps = 10
	var manifest strings.Builder
	manifest.WriteString("name: line\nsteps:\n  - {key: s0, builtin: noop}\n")
	for i := 1; i < steps; i++ {
		fmt.Fprintf(&manifest, "  - {key: s%d, needs: [s%d], builtin: noop}\n", i, i-1)
	}
	for _, tc := range []struct {
		name        string
		concurrency int
		inFinish    bool
	}{
		{"free slots", 4, true},
		{"one slot", 1, false}, // the claim loop or the finish, whichever takes the slot
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, tb := setup(t)
			v := deploy(t, tb, map[string]string{"cairn.yaml": manifest.String()})
			startDispatcher(t, tb, runtime.Config{ID: "d1", Concurrency: tc.concurrency})
			id := startRun(t, tb, v, "")
			run := waitRun(t, tb, id, 30*time.Second)
			require.Equal(t, catalog.RunSucceeded, run.Status)

			events, err := tb.store.EventList(ctx, id, 0, 100)
			require.NoError(t, err)
			succeeded := map[string]time.Time{}
			started := map[string]time.Time{}
			for _, e := range events {
				switch e.Type {
				case catalog.EventStepSucceeded:
					succeeded[e.StepKey] = e.CreatedAt
				case catalog.EventStepStarted:
					started[e.StepKey] = e.CreatedAt
				}
			}
			inFinish := 0
			for i := 1; i < steps; i++ {
				prev, next := fmt.Sprintf("s%d", i-1), fmt.Sprintf("s%d", i)
				require.Contains(t, succeeded, prev)
				require.Contains(t, started, next)
				if succeeded[prev].Equal(started[next]) {
					inFinish++
				} else {
					require.True(t, started[next].After(succeeded[prev]), "%s started by a claim after %s finished", next, prev)
				}
			}
			if tc.inFinish {
				// Not every time: a claim of the claim loop in flight (woken by
				// the previous attempt's end) holds the free slots meanwhile.
				require.Positive(t, inFinish, "no step was leased in the finish of the one before")
			}
			for i := 0; i < steps; i++ {
				attempts, err := tb.store.AttemptList(context.Background(), id, fmt.Sprintf("s%d", i))
				require.NoError(t, err)
				require.Len(t, attempts, 1, "one attempt of s%d", i)
				require.Equal(t, "d1", attempts[0].Dispatcher)
			}
		})
	}
}
