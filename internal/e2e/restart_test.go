package e2e

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRestartWithBacklog: `cairn serve` starts on a database holding 1,000 runs that
// no dispatcher has touched. It is ready within 2 s of its start (the backlog is
// not work to do before serving) and then finishes every run.
func TestRestartWithBacklog(t *testing.T) {
	t.Parallel()
	const runs = 1000
	st := newStack(t, stackOptions{})

	// The runs are created through an API-only server: nothing runs them yet.
	front := st.start(serverOptions{name: "api-only", noDispatcher: true})
	api := front.api()
	api.deploy(map[string]string{"cairn.yaml": `name: backlog
steps:
  - key: first
    builtin: noop
  - key: second
    needs: [first]
    builtin: echo
`})
	began := time.Now()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	next := make(chan int)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if _, err := api.tryStartRun("backlog", 0, map[string]int{"i": i}); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	for i := range runs {
		next <- i
	}
	close(next)
	wg.Wait()
	require.Empty(t, errs)
	t.Logf("created %d runs in %s", runs, time.Since(began).Round(time.Millisecond))
	front.stop(30 * time.Second)

	srv := st.start(serverOptions{name: "serve"})
	ready := srv.ready.Sub(srv.started)
	t.Logf("/readyz answered 200 %s after the process started, with %d runs waiting", ready.Round(time.Millisecond), runs)
	require.LessOrEqual(t, ready, 2*time.Second)
	api = srv.api()
	n, err := api.countRuns("backlog", "pending")
	require.NoError(t, err)
	t.Logf("%d runs still pending when the server was ready", n)

	// Wait until no run is pending or running.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		pending, err := api.countRuns("backlog", "pending")
		require.NoError(c, err)
		running, err := api.countRuns("backlog", "running")
		require.NoError(c, err)
		assert.Zero(c, pending+running, "runs pending or running")
	}, 50*time.Second, 250*time.Millisecond, "the backlog was not worked off")
	t.Logf("every run finished %s after the server was ready", time.Since(srv.ready).Round(time.Millisecond))
	succeeded, err := api.countRuns("backlog", "succeeded")
	require.NoError(t, err)
	require.Equal(t, runs, succeeded)
}
