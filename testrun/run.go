package testrun

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/functions"
	"github.com/cairnrun/cairn/runtime"
)

// Defaults of Config.
const (
	// DefaultCaseTimeout bounds the wall time of one case.
	DefaultCaseTimeout = 2 * time.Minute
	// pollEvery is how often the runner looks whether the catalog is quiet.
	pollEvery = 2 * time.Millisecond
)

// Config tunes a Runner. A nil *Config means the defaults.
type Config struct {
	// AllowNetwork lets the http and lambda steps a case does not mock call
	// their endpoints through Invokers; default false: such a case is refused
	// before it runs.
	AllowNetwork bool
	// Invokers are the real invokers of the kinds that need configuration
	// (http, lambda), used with AllowNetwork. Builtin and exec handlers run
	// with the runtime's default invokers (exec without a sandbox).
	Invokers map[bundle.Kind]functions.Invoker
	// CaseTimeout bounds each case's wall time; default DefaultCaseTimeout.
	CaseTimeout time.Duration
	// Logger receives the runtime's logs; default discard.
	Logger *slog.Logger
}

// Runner runs cases against one deployed version. Safe for concurrent use:
// each case gets its own database and dispatcher.
type Runner struct {
	env     *Env
	cfg     Config
	version *catalog.Version
	def     *bundle.Definition
	steps   map[string]*bundle.StepDefinition // by key, compensations and on_failure steps included
	tags    []string
}

// NewRunner returns a runner of the cases of version v, deployed in env
// (Env.Deploy).
func NewRunner(env *Env, v *catalog.Version, cfg *Config) (*Runner, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.CaseTimeout <= 0 {
		c.CaseTimeout = DefaultCaseTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	def, err := bundle.ParseDefinition(v.Definition)
	if err != nil {
		return nil, err
	}
	r := &Runner{env: env, cfg: c, version: v, def: def, steps: map[string]*bundle.StepDefinition{}}
	add := func(s *bundle.StepDefinition) {
		r.steps[s.Key] = s
		r.tags = append(r.tags, s.RunsOn...)
	}
	for i := range def.Steps {
		s := &def.Steps[i]
		add(s)
		if s.Compensate != nil {
			add(s.Compensate)
		}
	}
	for i := range def.OnFailure {
		add(&def.OnFailure[i])
	}
	slices.Sort(r.tags)
	r.tags = slices.Compact(r.tags)
	return r, nil
}

// Definition returns the definition of the version under test.
func (r *Runner) Definition() *bundle.Definition { return r.def }

// Check refuses a case that cannot run: a mock or an event naming a step the
// workflow lacks, a signal no step waits for, and, without AllowNetwork, an
// http or lambda step without a mock.
func (r *Runner) Check(c *Case) error {
	var errs []error
	for key := range c.Mocks {
		base := key
		if i := strings.LastIndexByte(key, '['); i > 0 && strings.HasSuffix(key, "]") {
			base = key[:i] // a map instance
		}
		if _, ok := r.steps[base]; !ok {
			errs = append(errs, fmt.Errorf("mocks: workflow %s has no step %q", r.def.Name, key))
		}
	}
	if !r.cfg.AllowNetwork {
		var keys []string
		for key, s := range r.steps {
			if s.Kind == bundle.KindHTTP || s.Kind == bundle.KindLambda {
				if _, ok := c.Mocks[key]; !ok {
					keys = append(keys, fmt.Sprintf("%s (%s)", key, s.Kind))
				}
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			errs = append(errs, fmt.Errorf("step %s has no mock: http and lambda steps must be mocked, or run with --allow-network", k))
		}
	}
	if c.Schedule != "" && !slices.ContainsFunc(r.def.Schedules, func(s bundle.ScheduleDefinition) bool { return s.Name == c.Schedule }) {
		errs = append(errs, fmt.Errorf("schedule: %s has no schedule %q", r.def.Name, c.Schedule))
	}
	signals := r.def.SignalNames()
	for i, e := range c.Events {
		switch {
		case e.Signal != "" && !slices.Contains(signals, e.Signal):
			errs = append(errs, fmt.Errorf("events[%d]: no signal step of %s waits for a signal %q", i, r.def.Name, e.Signal))
		case e.Approve != "" || e.Reject != "":
			key := e.Approve + e.Reject
			if s, ok := r.steps[key]; !ok || s.Kind != bundle.KindApproval {
				errs = append(errs, fmt.Errorf("events[%d]: %s has no approval step %q", i, r.def.Name, key))
			}
		case e.Callback != "":
			if _, ok := r.steps[e.Callback]; !ok {
				errs = append(errs, fmt.Errorf("events[%d]: %s has no step %q", i, r.def.Name, e.Callback))
			}
		}
	}
	return errors.Join(errs...)
}

// Run runs one case and checks its expectations. The result's Err says why a
// case could not run; its Failures, which expectations it missed.
func (r *Runner) Run(ctx context.Context, c *Case) *Result {
	res := &Result{Case: c.Name, File: c.File}
	began := time.Now()
	defer func() { res.Wall = time.Since(began) }()
	if err := r.Check(c); err != nil {
		res.Err = err
		return res
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.CaseTimeout)
	defer cancel()
	if err := r.run(ctx, c, res); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("the case did not end within %s of wall time: %w", r.cfg.CaseTimeout, err)
		}
		res.Err = err
		return res
	}
	res.Failures = check(c, res.Run)
	return res
}

func (r *Runner) run(ctx context.Context, c *Case, res *Result) error {
	db, err := r.env.newDatabase(ctx)
	if err != nil {
		return err
	}
	defer r.env.drop(context.WithoutCancel(ctx), db)
	store := db.store
	start := DefaultStart
	if c.Start != nil {
		start = c.Start.UTC()
	}
	if err := store.ClockSet(ctx, start); err != nil {
		return err
	}
	var mu sync.Mutex
	handled := map[string]bool{}
	maxTime := c.MaxTime.Std()
	if maxTime <= 0 {
		maxTime = DefaultMaxTime
	}
	// Before the dispatcher starts (its schedule loop fires too): only the
	// case's schedule fires, once.
	fired, err := r.fireSchedule(ctx, store, c.Schedule, start, maxTime)
	if err != nil {
		return err
	}
	invokers := map[bundle.Kind]functions.Invoker{}
	for _, kind := range []bundle.Kind{bundle.KindExec, bundle.KindHTTP, bundle.KindLambda, bundle.KindBuiltin} {
		m := &mockInvoker{kind: kind, mocks: c.Mocks, handled: func(key string) {
			mu.Lock()
			handled[key] = true
			mu.Unlock()
		}}
		switch kind {
		case bundle.KindExec:
			m.real = functions.NewExec(&functions.ExecConfig{Logger: r.cfg.Logger})
		case bundle.KindBuiltin:
			m.real = functions.NewBuiltin(nil)
		default:
			if r.cfg.AllowNetwork {
				m.real = r.cfg.Invokers[kind]
			}
		}
		invokers[kind] = m
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	d, err := runtime.New(store, r.env.blobs, &runtime.Config{
		ID:           "cairn-test",
		Concurrency:  16,
		Tags:         r.tags,
		PollInterval: 50 * time.Millisecond,
		DatabaseURL:  db.url,
		Logger:       r.cfg.Logger,
		Handlers: runtime.HandlerConfig{CacheDir: filepath.Join(r.env.dir, "cache", db.name),
			Invokers: invokers,
			// Callbacks are delivered by the case's events; the URL is never called.
			SigningKey: key,
			PublicURL:  "http://cairn-test.invalid",
		},
	})
	if err != nil {
		return err
	}
	if err := d.Start(ctx); err != nil {
		return err
	}
	defer func() { _ = d.Stop(context.WithoutCancel(ctx)) }()

	runID := fired
	if runID == uuid.Nil {
		input := json.RawMessage("null")
		if c.Input != nil {
			if input, err = json.Marshal(jsonValue(c.Input)); err != nil {
				return fmt.Errorf("input: %w", err)
			}
		}
		run, _, err := store.RunCreate(ctx, &catalog.RunCreateParams{Workflow: r.version.Workflow, Version: r.version.Version,
			Input: input, Labels: catalog.Labels(c.Labels)})
		if err != nil {
			return fmt.Errorf("start the run: %w", err)
		}
		runID = run.ID
	}
	// Events count from the run's start: the case's start, or the fire of its
	// schedule.
	first, err := store.RunGet(ctx, runID)
	if err != nil {
		return err
	}
	base := first.CreatedAt
	events := slices.Clone(c.Events)
	sort.SliceStable(events, func(i, j int) bool { return events[i].At < events[j].At })
	for {
		if err := r.quiet(ctx, store); err != nil {
			return err
		}
		now, err := store.ClockGet(ctx)
		if err != nil {
			return err
		}
		cur, err := store.RunGet(ctx, runID)
		if err != nil {
			return err
		}
		if cur.Status.Terminal() {
			for _, e := range events {
				res.Failures = append(res.Failures, fmt.Sprintf("event %s at %s was not delivered: the run ended (%s) at %s",
					e.what(), e.At, cur.Status, Duration(now.Sub(base))))
			}
			break
		}
		next, err := store.ClockNextDue(ctx)
		if err != nil {
			return err
		}
		if len(events) > 0 {
			at := base.Add(events[0].At.Std())
			if next.IsZero() || !at.After(next) {
				if at.After(now) {
					if err := store.ClockSet(ctx, at); err != nil {
						return err
					}
				}
				if err := r.deliver(ctx, store, runID, events[0]); err != nil {
					res.Failures = append(res.Failures, fmt.Sprintf("event %s at %s: %v", events[0].what(), events[0].At, err))
				}
				events = events[1:]
				continue
			}
		}
		if next.IsZero() || next.Sub(start) > maxTime {
			break // the run waits for nothing that will come
		}
		if !next.After(now) {
			// Due by ClockNextDue, not by ClockBusy (a rounding at their edge):
			// a millisecond on, so the case always moves.
			next = now.Add(time.Millisecond)
		}
		if err := store.ClockSet(ctx, next); err != nil {
			return err
		}
		if err := r.sweep(ctx, store); err != nil {
			return err
		}
	}
	end, err := store.ClockGet(ctx)
	if err != nil {
		return err
	}
	res.Virtual = end.Sub(start)
	if err := d.Stop(ctx); err != nil {
		return err
	}
	for key := range handled {
		res.Handlers = append(res.Handlers, key)
	}
	sort.Strings(res.Handlers)
	res.Run, err = summarize(ctx, store, runID, instanceKeys(c.Expect))
	return err
}

// fireSchedule pauses every schedule but the workflow's name, and, when name is
// set, moves the clock to that schedule's first fire after start, fires it
// (catalog.ScheduleFire, as the dispatcher's schedule loop does), pauses it
// and returns the run it created.
func (r *Runner) fireSchedule(ctx context.Context, store *catalog.Store, name string, start time.Time, maxTime time.Duration) (uuid.UUID, error) {
	// Every workflow's: the template may hold others (cairn test --with).
	var id int64
	p := &catalog.ScheduleListParams{Limit: 100}
	for {
		list, err := store.ScheduleList(ctx, p)
		if err != nil {
			return uuid.Nil, err
		}
		for _, s := range list {
			if s.Workflow == r.def.Name && s.Name == name {
				id = s.ID
				continue
			}
			if _, err := store.SchedulePause(ctx, s.ID, true, "cairn-test"); err != nil {
				return uuid.Nil, err
			}
		}
		if len(list) < p.Limit {
			break
		}
		p.After = list[len(list)-1].ID
	}
	if name == "" {
		return uuid.Nil, nil
	}
	if id == 0 {
		return uuid.Nil, fmt.Errorf("schedule %s: not in the catalog", name)
	}
	next := func(expr, tz string, t time.Time) (time.Time, bool) {
		loc, err := time.LoadLocation(tz)
		if err != nil {
			return time.Time{}, false
		}
		s, err := bundle.ParseCron(expr, loc)
		if err != nil {
			return time.Time{}, false
		}
		return bundle.NextFire(s, t)
	}
	for range 3 { // the first pass computes the next fire, the second fires it
		res, err := store.ScheduleFire(ctx, &catalog.ScheduleFireParams{Next: next})
		if err != nil {
			return uuid.Nil, err
		}
		if res.Created > 0 {
			break
		}
		if res.NextDue == nil || res.NextDue.Sub(start) > maxTime {
			return uuid.Nil, fmt.Errorf("schedule %s: no fire within %s of the start", name, Duration(maxTime))
		}
		if err := store.ClockSet(ctx, *res.NextDue); err != nil {
			return uuid.Nil, err
		}
	}
	s, err := store.ScheduleGet(ctx, id)
	if err != nil {
		return uuid.Nil, err
	}
	if s.LastRunID == nil {
		return uuid.Nil, fmt.Errorf("schedule %s: its fire created no run", name)
	}
	if _, err := store.SchedulePause(ctx, id, true, "cairn-test"); err != nil {
		return uuid.Nil, err
	}
	return *s.LastRunID, nil
}

// quiet waits until the catalog has nothing running or due at the clock's
// time.
func (r *Runner) quiet(ctx context.Context, store *catalog.Store) error {
	swept := false
	for {
		b, err := store.ClockBusy(ctx)
		if err != nil {
			return err
		}
		switch {
		case b.Running:
			swept = false
		case !b.Due:
			return nil
		case !swept:
			// Waits, deadlines and queue timeouts due now: the wake loop applies
			// them within its poll interval; applying them here is sooner.
			if err := r.sweep(ctx, store); err != nil {
				return err
			}
			swept = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pollEvery):
		}
	}
}

// sweep applies what is due at the clock's time: ends of waits and their
// timeouts, run deadlines, queue timeouts (what the dispatcher's wake loop
// does every poll interval).
func (r *Runner) sweep(ctx context.Context, store *catalog.Store) error {
	if _, err := store.WakeDue(ctx, 1000); err != nil {
		return err
	}
	if _, err := store.RunDeadlines(ctx, 1000); err != nil {
		return err
	}
	_, err := store.QueueTimeouts(ctx, 1000)
	return err
}

// deliver applies one event as the API would.
func (r *Runner) deliver(ctx context.Context, store *catalog.Store, runID uuid.UUID, e Event) error {
	switch {
	case e.Signal != "":
		payload, err := json.Marshal(jsonValue(e.Data))
		if err != nil {
			return err
		}
		_, err = store.SignalSend(ctx, &catalog.Signal{RunID: runID, Name: e.Signal, Payload: payload, Actor: "cairn-test"})
		return err
	case e.Approve != "" || e.Reject != "":
		dec, key := catalog.DecisionApproved, e.Approve
		if e.Reject != "" {
			dec, key = catalog.DecisionRejected, e.Reject
		}
		by := e.By
		if by == "" {
			by = "tester"
		}
		var in json.RawMessage
		if e.Input != nil {
			var err error
			if in, err = json.Marshal(jsonValue(e.Input)); err != nil {
				return err
			}
		}
		_, err := store.StepDecide(ctx, &catalog.StepDecision{RunID: runID, Key: key, Approver: by, Role: "operator",
			Decision: dec, Comment: e.Comment, Input: in})
		return err
	default:
		st, err := store.StepGet(ctx, runID, e.Callback)
		if err != nil {
			return err
		}
		res := catalog.Resolution{Outcome: catalog.OutcomeSucceeded, Reason: "callback"}
		if e.Error != nil {
			code := e.Error.Code
			if code == "" {
				code = "callback_failed"
			}
			res.Outcome = catalog.OutcomeFailed
			if res.Error, err = json.Marshal(map[string]string{"message": e.Error.Message, "code": code}); err != nil {
				return err
			}
		} else if res.Output, err = json.Marshal(jsonValue(e.Output)); err != nil {
			return err
		}
		_, err = store.CallbackComplete(ctx, runID, e.Callback, st.Attempts, res)
		return err
	}
}
