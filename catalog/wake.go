package catalog

import (
	"context"
	"sync"
	"time"
)

// wakeTimeout bounds one wake-up sent after a commit (a lost one costs only
// latency: the dispatchers poll).
const wakeTimeout = 5 * time.Second

// waker sends the dispatchers' wake-up after a commit, outside its transaction,
// folding those asked for while one is on its way into one more after it: at most
// one wake-up is in flight per Store, and one starts after every call to wake.
//
// A NOTIFY inside a transaction serializes its commit with every other notifying
// transaction's: PostgreSQL takes one lock on the notification queue from the
// NOTIFY's pre-commit to the end of its commit, the WAL flush included. Runs
// created by concurrent clients, each statement with its own NOTIFY, committed
// one at a time (16 clients: 1,100–1,230 creates/s, about one client's rate).
type waker struct {
	send func(ctx context.Context) error

	mu       sync.Mutex
	inFlight bool // a goroutine is sending
	again    bool // wake was called after the one in flight started
}

// wake has a wake-up sent soon, by a goroutine of its own: after this call, one
// starts.
func (w *waker) wake() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.inFlight {
		w.again = true
		return
	}
	w.inFlight = true
	go w.run()
}

func (w *waker) run() {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), wakeTimeout)
		_ = w.send(ctx) // a wake-up lost (database unreachable, closed) only costs latency
		cancel()
		w.mu.Lock()
		if !w.again {
			w.inFlight = false
			w.mu.Unlock()
			return
		}
		w.again = false
		w.mu.Unlock()
	}
}
