package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/functions"
)

// Causes that end an attempt's context. They tell the outcome apart: a timeout is a
// retryable timed_out attempt; a lost lease or a canceled run writes nothing (someone
// else owns the step now); a shutdown hands the lease back.
var (
	errTimeout     = errors.New("step timed out")
	errLeaseLost   = errors.New("lease lost")
	errRunCanceled = errors.New("run canceled")
	errShutdown    = errors.New("dispatcher shutting down")
	// errAbandoned ends the recording of an outcome at shutdown when the database
	// does not answer in time: the step is swept once its lease expires.
	errAbandoned = errors.New("outcome abandoned at shutdown")
)

// Dispatcher claims ready steps and runs their attempts. Create it with New, run it
// with Start and stop it with Stop. It is safe for concurrent use.
type Dispatcher struct {
	store    *catalog.Store
	blobs    Blobs
	cfg      Config
	logger   *slog.Logger
	metrics  *metrics
	versions *definitions // compiled versions, cached
	cache    *fileCache

	wake        chan struct{}    // a hint that work may be claimable
	completions chan *completion // outcomes for the group commit
	slots       chan struct{}    // one token per free concurrency slot
	// finishing holds a token per attempt whose handler has returned and whose
	// outcome waits for its commit, having given its slot back (finishEarly):
	// at most Concurrency of them.
	finishing chan struct{}
	// admit lowers how many attempts run at once while handlers start slowly.
	admit *admission

	mu     sync.Mutex
	active map[int64]*attempt // by lease token
	life   lifecycle
	// nextDue is the earliest local retry we know of; nextWake the earliest end of
	// a wait this dispatcher started (wakeAt). Under mu.
	nextDue  time.Time
	nextWake time.Time
	hints    hints
	mapItems mapItemsCache // blob maps' items read ahead (mapPage)
	// mapDue are the maps whose instances ended since the map loop last looked,
	// mapAll that a map started (mapNudge, mapNudgeInstance); under mapMu.
	mapMu  sync.Mutex
	mapDue map[catalog.MapRef]struct{}
	mapAll bool

	// lastDBError is when a database call of the loops last failed (unix nanos).
	// After an outage the sweeper waits two lease TTLs, so that owners can renew
	// their leases and report outcomes before their steps are taken from them.
	lastDBError atomic.Int64

	// drained is set when the last claim got fewer steps than it asked for (no
	// step was left waiting): only then does the finish of a success lease the
	// dependents it makes ready (completeLoop).
	drained atomic.Bool

	// listen is what the listen loop knows of its notifications (listen.go).
	listen listenState
}

// lifecycle is the state of Start and Stop.
type lifecycle struct {
	started bool // under Dispatcher.mu, as stopped
	stopped bool
	cancel  context.CancelFunc // ends the background loops
	loops   sync.WaitGroup     // background loops
	work    sync.WaitGroup     // running attempts
	noClaim chan struct{}      // closed when claiming must stop
	// abandonCtx ends when Stop gives up on writing what is left (outcomes, logs)
	// because the database or the blob store does not answer in time.
	abandonCtx context.Context
	abandon    context.CancelFunc
	// done is closed when the first Stop has finished; err is its result.
	done chan struct{}
	err  error
	// claimDone is closed when the claim loop has returned: no attempt starts
	// after it (shutdown waits for it before it waits for the attempts, as a
	// WaitGroup's Add from zero must not run beside its Wait).
	claimDone chan struct{}
}

// hints wake the dispatcher's loops: work may be claimable (claim), a wait this
// dispatcher started may be due (wake), the maps may have work (maps).
type hints struct {
	claim chan struct{}
	wake  chan struct{}
	maps  chan struct{}
}

// New returns a dispatcher over store and blobs. Invokers for builtin and exec are
// added when cfg does not set them.
func New(store *catalog.Store, blobs Blobs, cfg *Config) (*Dispatcher, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	invokers := make(map[bundle.Kind]functions.Invoker, len(c.Handlers.Invokers)+2)
	for k, v := range c.Handlers.Invokers {
		invokers[k] = v
	}
	if invokers[bundle.KindBuiltin] == nil {
		invokers[bundle.KindBuiltin] = functions.NewBuiltin(nil)
	}
	if invokers[bundle.KindExec] == nil {
		invokers[bundle.KindExec] = functions.NewExec(&functions.ExecConfig{Logger: c.Logger})
	}
	c.Handlers.Invokers = invokers
	cache, err := newFileCache(c.Handlers.CacheDir, blobs, c.Handlers.CacheMaxBytes)
	if err != nil {
		return nil, err
	}
	d := &Dispatcher{
		store:    store,
		blobs:    blobs,
		cfg:      c,
		logger:   c.Logger.With("component", "dispatcher", "dispatcher", c.ID),
		metrics:  newMetrics(c.Registerer),
		versions: newDefinitions(store),
		cache:    cache,
		hints:    hints{claim: make(chan struct{}, 1), wake: make(chan struct{}, 1), maps: make(chan struct{}, 1)},

		completions: make(chan *completion, c.Concurrency),
		slots:       make(chan struct{}, c.Concurrency),
		finishing:   make(chan struct{}, c.Concurrency),
		admit:       newAdmission(c.Concurrency, c.StartLatencyTarget),
		active:      map[int64]*attempt{},
		life:        lifecycle{noClaim: make(chan struct{}), done: make(chan struct{}), claimDone: make(chan struct{})},
	}
	if cache.shared {
		d.logger.Warn("another dispatcher uses this cache directory: its size cap is off; give each dispatcher its own --cache-dir",
			"cache_dir", c.Handlers.CacheDir)
	}
	d.metrics.admissionLimit.Set(float64(c.Concurrency))
	// The exec invoker's own series (functions/exec_metrics.go): where its
	// attempts' time goes. Another dispatcher on the same registry and invoker
	// registered them already.
	if col, ok := invokers[bundle.KindExec].(prometheus.Collector); ok && c.Registerer != nil {
		if err := c.Registerer.Register(col); err != nil && !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
			return nil, fmt.Errorf("register the exec invoker's metrics: %w", err)
		}
	}
	d.life.abandonCtx, d.life.abandon = context.WithCancel(context.Background())
	for i := 0; i < c.Concurrency; i++ {
		d.slots <- struct{}{}
	}
	return d, nil
}

// ID returns the dispatcher's name, as recorded in leases and attempts.
func (d *Dispatcher) ID() string { return d.cfg.ID }

// Tags returns the dispatcher's tags (Config.Tags), sorted and without repeats,
// as the registry of live dispatchers records them (maintenance.Registry).
func (d *Dispatcher) Tags() []string { return slices.Clone(d.cfg.Tags) }

// Start runs the dispatcher's loops (claim, complete, heartbeat, sweep, wake, map
// and notifications) in the background and returns. The loops live until Stop, not
// until ctx ends. The server's housekeeping runs beside it (package maintenance).
func (d *Dispatcher) Start(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.life.started {
		return errors.New("dispatcher already started")
	}
	if d.life.stopped {
		return errors.New("dispatcher stopped")
	}
	d.life.started = true
	loopCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	d.life.cancel = cancel
	for _, loop := range []func(context.Context){d.claimLoop, d.completeLoop, d.heartbeatLoop, d.sweepLoop, d.wakeLoop, d.mapLoop, d.listenLoop} {
		d.life.loops.Add(1)
		go func() {
			defer d.life.loops.Done()
			loop(loopCtx)
		}()
	}
	caps := d.Capabilities()
	d.logger.Info("dispatcher started", "concurrency", d.cfg.Concurrency, "lease_ttl", d.cfg.LeaseTTL, "exec", caps[string(bundle.KindExec)],
		"tags", d.cfg.Tags)
	for what, state := range caps {
		if strings.HasPrefix(state, "unavailable") && what != string(bundle.KindLambda) {
			d.logger.Warn("this dispatcher cannot run some steps: they fail after their retries", "what", what, "state", state)
		}
	}
	return nil
}

// Stop stops claiming, lets running attempts finish for up to ShutdownGrace (or until
// ctx ends), then hands the leases of those still running back so another dispatcher
// takes them at once. Writing what is left (outcomes, hand-backs, logs) gets another
// ShutdownGrace; if the database or the blob store does not answer by then, or ctx
// ends, it is given up: those steps are swept when their leases expire. So Stop
// returns within about twice ShutdownGrace, whatever the state of the database.
//
// Stop returns nil when every outcome was written, otherwise an error saying what
// was given up (wrapping ctx's error when ctx ended first). It is safe to call
// more than once, and before Start: a later call waits for the first one (or ctx)
// and returns its result.
func (d *Dispatcher) Stop(ctx context.Context) error {
	d.mu.Lock()
	if d.life.stopped {
		d.mu.Unlock()
		select {
		case <-d.life.done:
			return d.life.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	d.life.stopped = true
	close(d.life.noClaim)
	started := d.life.started
	d.mu.Unlock()
	if started {
		d.life.err = d.shutdown(ctx)
	}
	d.cache.close() // no attempt uses it any more
	close(d.life.done)
	return d.life.err
}

// shutdown is Stop's work once claiming has stopped.
func (d *Dispatcher) shutdown(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		<-d.life.claimDone // the last attempt has been started
		d.life.work.Wait()
		close(done)
	}()
	grace := time.NewTimer(d.cfg.ShutdownGrace)
	defer grace.Stop()
	select {
	case <-done:
	case <-grace.C:
	case <-ctx.Done():
	}
	// Whatever still runs is handed back.
	d.mu.Lock()
	running := len(d.active)
	for _, a := range d.active {
		a.cancel(errShutdown)
	}
	d.mu.Unlock()
	var err error
	grace.Reset(d.cfg.ShutdownGrace)
	select {
	case <-done:
	case <-grace.C:
		err = fmt.Errorf("stop dispatcher: gave up recording the outcomes of up to %d attempts after %s; their steps are swept when their leases expire", running, 2*d.cfg.ShutdownGrace)
	case <-ctx.Done():
		err = fmt.Errorf("stop dispatcher: gave up recording the outcomes of up to %d attempts: %w", running, ctx.Err())
	}
	d.life.abandon()
	<-done
	d.life.cancel()
	d.life.loops.Wait()
	if err != nil {
		d.logger.Warn("dispatcher stopped without recording every outcome", "error", err)
	} else {
		d.logger.Info("dispatcher stopped")
	}
	return err
}

// nudge hints the claim loop that steps may be claimable (a notification, a
// finished attempt, a due retry, a sweep).
func (d *Dispatcher) nudge() {
	select {
	case d.hints.claim <- struct{}{}:
	default:
	}
}

func (d *Dispatcher) claiming() bool {
	select {
	case <-d.life.noClaim:
		return false
	default:
		return true
	}
}

// claimLoop claims as many steps as there are free slots, whenever woken (a
// notification, a finished attempt, a due retry) or every PollInterval.
func (d *Dispatcher) claimLoop(ctx context.Context) {
	defer close(d.life.claimDone)
	poll := time.NewTimer(0)
	defer poll.Stop()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.life.noClaim:
			return
		case <-d.hints.claim:
		case <-poll.C:
		}
		d.decideConditions(ctx)
		for d.claiming() {
			n, full, err := d.claimOnce(ctx)
			if err != nil {
				d.noteDBError()
				failures++
				if ctx.Err() == nil {
					d.logger.Warn("claim failed", "error", err)
				}
				break
			}
			failures = 0
			if !full || n == 0 {
				break
			}
		}
		wait := d.pollInterval()
		if failures > 0 {
			wait = min(time.Duration(failures)*d.cfg.PollInterval, 10*d.cfg.PollInterval)
		}
		d.mu.Lock()
		if !d.nextDue.IsZero() {
			if until := time.Until(d.nextDue); until < wait {
				wait = max(until, time.Millisecond)
			}
			if time.Until(d.nextDue) <= 0 {
				d.nextDue = time.Time{}
			}
		}
		d.mu.Unlock()
		poll.Reset(wait)
	}
}

// takeSlots takes the free slots, at most ClaimBatch, without waiting, and
// returns how many it took (given back with release).
func (d *Dispatcher) takeSlots() int {
	n := 0
	for n < d.cfg.ClaimBatch {
		select {
		case <-d.slots:
			n++
		default:
			return n
		}
	}
	return n
}

// claimOnce claims up to the free slots (at most ClaimBatch) and starts their
// attempts. full reports that it got all it asked for, so more may be waiting.
func (d *Dispatcher) claimOnce(ctx context.Context) (n int, full bool, err error) {
	want := d.takeSlots()
	if want == 0 {
		// Every slot is busy: wait for one, or for the end.
		select {
		case <-d.slots:
			want = 1
		case <-ctx.Done():
			return 0, false, nil
		case <-d.life.noClaim:
			return 0, false, nil
		}
	}
	// Below the concurrency, what the machine starts promptly (admission.go):
	// the rest stays ready in the catalog. An attempt that ends nudges the claim
	// loop, which looks again.
	d.mu.Lock()
	running := len(d.active) - len(d.finishing)
	d.mu.Unlock()
	if allowed := d.admit.allowed(running); allowed < want {
		d.release(want - allowed)
		if want = allowed; want == 0 {
			return 0, false, nil
		}
	}
	claimStart := time.Now()
	claimed, next, err := d.store.StepClaimNext(ctx, d.cfg.ID, d.cfg.Tags, want, d.cfg.LeaseTTL)
	if err != nil {
		d.release(want)
		return 0, false, err
	}
	if next > 0 {
		// Steps wait for a rate limit's token: look again when the next one is in.
		d.noteDue(time.Now().Add(next))
	}
	d.drained.Store(len(claimed) < want)
	d.release(want - len(claimed))
	d.metrics.claimed.Add(float64(len(claimed)))
	for i := range claimed {
		d.startAttempt(claimed[i], claimStart)
	}
	return len(claimed), len(claimed) == want, nil
}

func (d *Dispatcher) release(n int) {
	for i := 0; i < n; i++ {
		d.slots <- struct{}{}
	}
}

// noteDue makes the claim loop's next look be at t at the latest, without waking it
// now (it is the claim loop that learns of t).
func (d *Dispatcher) noteDue(t time.Time) {
	d.mu.Lock()
	if d.nextDue.IsZero() || t.Before(d.nextDue) {
		d.nextDue = t
	}
	d.mu.Unlock()
}

// scheduleWake makes the claim loop look again at t (a retry this dispatcher set).
func (d *Dispatcher) scheduleWake(t time.Time) {
	d.mu.Lock()
	if d.nextDue.IsZero() || t.Before(d.nextDue) {
		d.nextDue = t
	}
	d.mu.Unlock()
	d.nudge()
}

// heartbeatLoop renews this dispatcher's liveness and extends every held lease at
// a third of the TTL (catalog.LeaseExtend: on a connection of its own, waiting for
// no row lock). A renewal that fails is tried again after a ninth of the TTL, and
// each one may take up to a whole TTL: a slow database delays a renewal, it does
// not cancel it, since a lease is only lost to a sweeper once it has not been
// renewed for a TTL. Leases the catalog no longer grants (swept after a long
// pause, run canceled) end their attempts.
func (d *Dispatcher) heartbeatLoop(ctx context.Context) {
	interval := d.cfg.LeaseTTL / 3
	t := time.NewTimer(interval)
	defer t.Stop()
	lastOK := time.Now()
	var lastWarn time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		t.Reset(interval)
		d.mu.Lock()
		leases := make([]catalog.Lease, 0, len(d.active))
		for tok, a := range d.active {
			leases = append(leases, catalog.Lease{RunID: a.claim.RunID, Key: a.claim.Key, Token: tok})
		}
		d.mu.Unlock()
		if len(leases) == 0 {
			lastOK = time.Now()
			continue
		}
		hctx, cancel := context.WithTimeout(ctx, d.cfg.LeaseTTL)
		began := time.Now()
		held, err := d.store.LeaseExtend(hctx, d.cfg.ID, leases, d.cfg.LeaseTTL)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			// The attempts go on: when the database answers again the leases are
			// renewed (sweepers wait a lease TTL after an outage) or found lost.
			// Only the catalog's answer ends an attempt.
			d.noteDBError()
			d.metrics.heartbeatFailed.Inc()
			if time.Since(lastWarn) >= interval {
				lastWarn = time.Now()
				d.logger.Warn("heartbeat failed", "error", err, "leases", len(leases), "since_last_renewal", time.Since(lastOK))
			}
			t.Reset(interval / 3)
			continue
		}
		lastOK = time.Now()
		d.metrics.heartbeat.Observe(lastOK.Sub(began).Seconds())
		var lost []catalog.Lease
		for _, l := range leases {
			if !held[l.Token] {
				lost = append(lost, l)
			}
		}
		// An attempt that finished after the snapshot above no longer holds its
		// lease either: loseLeases tells it from a real loss.
		d.loseLeases(lost, "heartbeat")
	}
}

func (d *Dispatcher) loseLeases(leases []catalog.Lease, op string) {
	if len(leases) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, l := range leases {
		a := d.active[l.Token]
		if a == nil || a.ending() {
			// Gone or ending on its own (its outcome is being recorded, the run was
			// canceled, it timed out): its lease ended normally, or the write of its
			// outcome finds out and counts the loss.
			continue
		}
		d.metrics.leaseLost.WithLabelValues(op).Inc()
		d.logger.Warn("lease lost", "run_id", l.RunID, "step", l.Key, "lease_token", l.Token)
		a.cancel(errLeaseLost)
	}
}

// cancelRun ends the local attempts of a canceled run.
func (d *Dispatcher) cancelRun(runID uuid.UUID) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, a := range d.active {
		if a.claim.RunID == runID {
			a.cancel(errRunCanceled)
		}
	}
}

// sweepLoop returns expired leases of any dispatcher: every SweepInterval
// (jittered), and sooner when the earliest lease expires before that, so a dead
// dispatcher's steps are taken back about when their leases end.
func (d *Dispatcher) sweepLoop(ctx context.Context) {
	for {
		wait := d.cfg.SweepInterval/2 + time.Duration(jitterRand()*float64(d.cfg.SweepInterval))
		if next, err := d.store.NextLeaseExpiry(ctx, d.sweepGrace()); err == nil && !next.IsZero() {
			// A little after the expiry, spread between dispatchers.
			until := time.Until(next) + time.Duration((0.05+0.1*jitterRand())*float64(d.cfg.LeaseTTL))
			wait = max(min(wait, until), 10*time.Millisecond)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if since := time.Since(time.Unix(0, d.lastDBError.Load())); since < d.sweepGrace() {
			d.logger.Debug("sweep deferred after a database error", "since", since)
			continue
		}
		for {
			n, err := d.store.StepSweep(ctx, 100, d.sweepGrace())
			if err != nil {
				d.noteDBError()
				if ctx.Err() == nil {
					d.logger.Warn("sweep failed", "error", err)
				}
				break
			}
			if n > 0 {
				d.metrics.swept.Add(float64(n))
				d.logger.Info("swept expired leases", "count", n)
				d.nudge()
			}
			if n < 100 {
				break // none due, or the rest belong to busy runs: the next round
			}
		}
	}
}

// sweepGrace is how long after an outage leases are not swept, so that their owners
// renew them and report their outcomes first: two lease TTLs (a heartbeat comes
// every third of one). Two memories of an outage apply it: this process's own
// (lastDBError: the database did not answer us, though it may have answered
// others) and the database's (its start or promotion: it was down for everyone,
// including dispatchers that started after it came back; see catalog.StepSweep).
func (d *Dispatcher) sweepGrace() time.Duration { return 2 * d.cfg.LeaseTTL }

// noteDBError records that a database call failed just now (see sweepGrace).
func (d *Dispatcher) noteDBError() { d.lastDBError.Store(time.Now().UnixNano()) }

// NoteDBError records that a database call of the server failed just now, as the
// dispatcher's own loops do (see sweepGrace): cairn serve hands it to the
// housekeeping services (maintenance.ReaperConfig.OnDBError and the like). It is
// safe for concurrent use.
func (d *Dispatcher) NoteDBError() { d.noteDBError() }

func (d *Dispatcher) String() string { return fmt.Sprintf("dispatcher %s", d.cfg.ID) }

// isolator is an invoker that says how it isolates handlers (functions.Exec).
type isolator interface {
	Isolation() (string, error)
}

// Capabilities says what this dispatcher can run, for /readyz and the start-up
// log: one entry per step kind ("ok", how exec handlers are isolated, or why the
// kind cannot run here) and "cache" (whether bundles can be installed). Steps of a
// kind that cannot run here fail with a counted, retryable error (a retry may
// land on another dispatcher), so their retry policy bounds them.
func (d *Dispatcher) Capabilities() map[string]string {
	out := make(map[string]string, 5)
	for _, k := range []bundle.Kind{bundle.KindExec, bundle.KindHTTP, bundle.KindLambda, bundle.KindBuiltin} {
		inv := d.cfg.Handlers.Invokers[k]
		state := "ok"
		if inv == nil {
			state = "unavailable: not configured"
		} else if iso, ok := inv.(isolator); ok {
			how, err := iso.Isolation()
			if err != nil {
				state = "unavailable: " + err.Error()
			} else {
				state = "ok: " + how
			}
		}
		out[string(k)] = state
	}
	out["cache"] = "ok"
	if err := d.cache.writable(); err != nil {
		var errno syscall.Errno
		reason := "not writable"
		if errors.As(err, &errno) {
			reason += " (" + errno.Error() + ")"
		}
		out["cache"] = "unavailable: " + reason
	}
	return out
}
