package functions

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestExecSurvivesEndedThreads: goroutines that lock their OS thread and return
// without unlocking end that thread (test helpers and libraries do it to tie
// their children to a goroutine). A handler running meanwhile is not killed by
// its parent-death signal: it was forked on a thread that never ends.
func TestExecSurvivesEndedThreads(t *testing.T) {
	t.Parallel()
	b := setupExec(t, nil)
	b.script(t, "wait", "sleep 1\necho '\"done\"'")
	result := invokeAsync(context.Background(), b.exec, b.invocation("wait"), &testSink{})
	// Meanwhile, many threads end (each with the goroutine that locked it).
	var wg sync.WaitGroup
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		}()
	}
	wg.Wait()
	require.NoError(t, waitResultWithin(t, result, 30*time.Second), "the handler was killed when a thread ended")
}
