package runtime

import (
	"sync"
	"time"
)

// admission keeps a dispatcher from running more attempts than its machine can
// start promptly. Config.Concurrency is an upper bound; below it, the number of
// attempts allowed to run at once (the limit) follows how long claimed attempts
// take to start their handler (claim → handler started: the definition, the
// bundle, the inputs, the process): additive increase, multiplicative decrease,
// as TCP's congestion window. Each attempt that starts within the target raises
// the limit by one, up to the concurrency; one that starts later than the target
// cuts it by a quarter, at most once per cut period, down to a floor; and a
// limit not cut for a recovery period grows back by a quarter (attempts that
// wait for each other start nothing new that would raise it). So when
// work arrives faster than the cores can start handlers, the rest waits as
// ready in the catalog (where any server may claim it) instead of holding leases
// here that its heartbeats and handlers no longer have the processor to keep.
//
// It starts at the concurrency: a machine that starts handlers promptly never
// sees it. It is safe for concurrent use.
type admission struct {
	mu         sync.Mutex
	limit      float64
	max        float64
	floor      float64
	target     time.Duration
	lastChange time.Time
	// now is time.Now; tests replace it.
	now func() time.Time
}

const (
	// admissionCutEvery spaces the cuts: the attempts claimed before a cut start
	// late too, and must not cut it again.
	admissionCutEvery = time.Second
	// admissionRecover is how long a limit under the concurrency stays without
	// a cut before it grows back by a quarter.
	admissionRecover = 2 * time.Second
	// admissionFloor is the smallest limit (or the concurrency, when lower).
	admissionFloor = 4
)

// newAdmission returns an admission with limit max (Config.Concurrency) and the
// start-latency target.
func newAdmission(max int, target time.Duration) *admission {
	return &admission{limit: float64(max), max: float64(max), floor: float64(min(max, admissionFloor)),
		target: target, now: time.Now}
}

// allowed returns how many attempts may start now with running ones running.
func (a *admission) allowed(running int) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.limit < a.max {
		if now := a.now(); now.Sub(a.lastChange) >= admissionRecover {
			a.lastChange = now
			a.limit = min(a.limit*1.25, a.max)
		}
	}
	return max(int(a.limit)-running, 0)
}

// current returns the limit.
func (a *admission) current() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return int(a.limit)
}

// observe takes the start latency of one attempt and returns the new limit.
func (a *admission) observe(latency time.Duration) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if latency <= a.target {
		a.limit = min(a.limit+1, a.max)
		return int(a.limit)
	}
	if now := a.now(); now.Sub(a.lastChange) >= admissionCutEvery {
		a.lastChange = now
		a.limit = max(a.limit*0.75, a.floor)
	}
	return int(a.limit)
}
