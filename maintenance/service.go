package maintenance

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"sync"
	"time"
)

// Service is what every service of the package is: Start runs its loop in the
// background and returns (an error when it was started or stopped before); Stop
// ends the loop and waits for it, or for ctx (then it returns ctx's error), and is
// safe to call twice and before Start.
type Service interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

// Group is services run together: Start starts them in order, Stop stops them in
// the reverse order.
type Group []Service

// Start starts every service in order. When one fails, those started are stopped
// again and its error is returned.
func (g Group) Start(ctx context.Context) error {
	for i, s := range g {
		if err := s.Start(ctx); err != nil {
			return errors.Join(err, g[:i].Stop(context.WithoutCancel(ctx)))
		}
	}
	return nil
}

// Stop stops every service, the last started first, and returns their errors
// joined.
func (g Group) Stop(ctx context.Context) error {
	var errs []error
	for i := len(g) - 1; i >= 0; i-- {
		errs = append(errs, g[i].Stop(ctx))
	}
	return errors.Join(errs...)
}

// loop is the lifecycle every service shares, as River's startstop.BaseStartStop:
// start runs one function in a goroutine, with a context that ends at stop (not
// when start's ctx ends); stop cancels it and waits for the function to return.
type loop struct {
	name    string // the service, for errors
	mu      sync.Mutex
	stopped bool
	cancel  context.CancelFunc
	done    chan struct{} // closed when run has returned; nil before start
}

func (l *loop) start(ctx context.Context, run func(ctx context.Context)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return fmt.Errorf("%s stopped", l.name)
	}
	if l.done != nil {
		return fmt.Errorf("%s already started", l.name)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	l.cancel, l.done = cancel, make(chan struct{})
	go func() {
		defer close(l.done)
		run(runCtx)
	}()
	return nil
}

func (l *loop) stop(ctx context.Context) error {
	l.mu.Lock()
	l.stopped = true
	cancel, done := l.cancel, l.done
	l.mu.Unlock()
	if done == nil {
		return nil // never started
	}
	cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop %s: %w", l.name, ctx.Err())
	}
}

// idle waits between two rounds of a periodic loop: about period, jittered within
// ±50 % so that servers started together spread their rounds. false when ctx ends:
// the loop returns.
func idle(ctx context.Context, period time.Duration) bool {
	t := time.NewTimer(period/2 + time.Duration(mrand.Float64()*float64(period)))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// newOwner is a name unique to one service's holder of catalog leases:
// host-pid-random.
func newOwner() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), rand.Text()[:8])
}
