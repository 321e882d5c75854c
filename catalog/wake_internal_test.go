package catalog

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWakerFolds: the wake-ups asked for while one is on its way are folded into
// one more, sent after it (so one starts after every call), and nothing is sent
// without a call. The send here stands for the NOTIFY, so that the test can hold
// one in flight.
func TestWakerFolds(t *testing.T) {
	t.Parallel()
	started := make(chan int, 10)
	release := make(chan struct{})
	var mu sync.Mutex
	n := 0
	w := &waker{send: func(context.Context) error {
		mu.Lock()
		n++
		i := n
		mu.Unlock()
		started <- i
		<-release
		return nil
	}}
	next := func(what string) int {
		t.Helper()
		select {
		case i := <-started:
			return i
		case <-time.After(10 * time.Second):
			t.Fatalf("no wake-up sent after %s", what)
			return 0
		}
	}
	none := func(what string) {
		t.Helper()
		select {
		case i := <-started:
			t.Fatalf("wake-up %d sent after %s", i, what)
		case <-time.After(100 * time.Millisecond):
		}
	}

	w.wake()
	require.Equal(t, 1, next("the first call"))
	for range 5 {
		w.wake() // while the first is in flight
	}
	none("calls folded while one is in flight")
	release <- struct{}{}
	require.Equal(t, 2, next("five calls during the first"), "one more, for the five")
	release <- struct{}{}
	none("the one that folded them")

	// The sender is gone; the next call starts another.
	w.wake()
	require.Equal(t, 3, next("a call once all were sent"))
	release <- struct{}{}
	none("the last one")

	// A failed send (the database unreachable) does not stop the next ones.
	failing := &waker{send: func(context.Context) error { started <- 0; return context.DeadlineExceeded }}
	failing.wake()
	next("a call whose send fails")
	failing.wake()
	next("a call after a failed send")
}
