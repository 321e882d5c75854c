package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/expr"
	"github.com/cairnrun/cairn/functions"
)

// Durable waits (docs/functions.md, "Waiting"): a sleep or signal step runs no
// function. The dispatcher that claims it suspends it at once (catalog.StepSuspend)
// and frees the slot; from then on the step is a row that any dispatcher's wake
// loop (or a signal) ends.

// suspend starts the wait of a claimed sleep or signal step. A sleep of a duration
// ends that long after the claim, by the database's clock (the claim's lease expiry
// less the lease TTL), so that dispatchers' clocks do not matter; a sleep until an
// expression evaluates it now, and an expression that fails fails the step (code
// expression, not retried).
func (d *Dispatcher) suspend(ctx context.Context, a *attempt, step *bundle.StepDefinition) {
	c := a.claim
	dbNow := c.LeaseExpiresAt.Add(-d.cfg.LeaseTTL)
	var w catalog.Wait
	var approval *catalog.Approval
	switch step.Kind {
	case bundle.KindSleep:
		w.Kind = catalog.WaitSleep
		if step.Sleep.Duration != nil {
			w.Until = dbNow.Add(step.Sleep.Duration.Std())
			break
		}
		// The claim does not carry the run's labels: read them, for the steps
		// whose expression may name them.
		run, err := d.store.RunGet(ctx, c.RunID)
		if err != nil {
			d.report(a, infraOutcome(a, "read the run's labels", err), step)
			return
		}
		until, err := d.evalUntil(ctx, c, step, run.Labels)
		if err != nil {
			d.report(a, outcome{status: catalog.OutcomeFailed,
				err: &functions.Error{Message: fmt.Sprintf("sleep.until: %v", err), Code: expr.Code}}, step)
			return
		}
		w.Until = until
	case bundle.KindSignal:
		w.Kind, w.Name, w.OnTimeout = catalog.WaitSignal, step.Signal.Name, catalog.OnTimeout(step.Signal.OnTimeout)
		if step.Signal.Timeout != nil {
			w.TimeoutAt = dbNow.Add(step.Signal.Timeout.Std())
		}
	case bundle.KindWaitForEvent:
		w.Kind, w.Name, w.OnTimeout = catalog.WaitEvent, step.WaitForEvent.Event, catalog.OnTimeout(step.WaitForEvent.OnTimeout)
		if step.WaitForEvent.Timeout != nil {
			w.TimeoutAt = dbNow.Add(step.WaitForEvent.Timeout.Std())
		}
	case bundle.KindApproval:
		w.Kind, w.OnTimeout = catalog.WaitApproval, catalog.OnTimeout(step.Approval.OnTimeout)
		if step.Approval.Timeout != nil {
			w.TimeoutAt = dbNow.Add(step.Approval.Timeout.Std())
		}
		approval = &catalog.Approval{Required: step.Approval.Required, Roles: step.Approval.Roles,
			TimeoutAt: w.TimeoutAt, OnTimeout: w.OnTimeout}
	default:
		d.report(a, outcome{status: catalog.OutcomeFailed, err: functions.Terminalf("step %q of kind %s does not wait", c.Key, step.Kind)}, step)
		return
	}
	a.reporting.Store(true)
	took := false
	err := d.suspendWritten(a, "suspend the step", "wait", nil, func() error {
		if approval != nil {
			return d.store.ApprovalSuspend(d.life.abandonCtx, a.lease(), *approval)
		}
		if w.Kind == catalog.WaitEvent {
			// It takes a matching event received since its run began, if any.
			var err error
			took, err = d.store.EventWaitSuspend(d.life.abandonCtx, a.lease(), catalog.EventWait{Wait: w, Match: step.WaitForEvent.Match})
			return err
		}
		return d.store.StepSuspend(d.life.abandonCtx, a.lease(), w)
	})
	if err != nil {
		return
	}
	d.metrics.attempts.WithLabelValues("suspended").Inc()
	if took {
		d.metrics.eventsTaken.Inc()
	}
	if due := w.Until; !due.IsZero() {
		d.wakeAt(due)
	} else if !w.TimeoutAt.IsZero() {
		d.wakeAt(w.TimeoutAt)
	}
}

// evalUntil evaluates a sleep's until expression against the step's scope.
func (d *Dispatcher) evalUntil(ctx context.Context, c catalog.Claimed, step *bundle.StepDefinition, labels catalog.Labels) (time.Time, error) {
	prg, err := expr.StepEnv.Compile(step.Sleep.Until)
	if err != nil {
		return time.Time{}, err
	}
	vars, err := stepVars(c, step)
	if err != nil {
		return time.Time{}, err
	}
	vars[expr.Labels] = map[string]string(labels)
	return prg.EvalTime(ctx, vars)
}

// stepVars are the names a step's expressions see (expr.StepEnv) that its claim
// carries: all but labels (item and index only in a map instance).
func stepVars(c catalog.Claimed, step *bundle.StepDefinition) (expr.Vars, error) {
	params, err := json.Marshal(step.With)
	if err != nil {
		return nil, fmt.Errorf("encode params: %w", err)
	}
	input, deps := json.RawMessage(c.Input), json.RawMessage(c.Deps)
	if len(input) == 0 {
		input = json.RawMessage("null")
	}
	if len(deps) == 0 {
		deps = json.RawMessage("{}")
	}
	vars := expr.Vars{
		expr.Input:  input,
		expr.Deps:   deps,
		expr.Params: json.RawMessage(params),
		expr.Run:    map[string]any{"id": c.RunID.String(), "workflow": c.Workflow, "version": c.Version},
	}
	if c.MapIndex != nil {
		vars[expr.Item], vars[expr.Index] = json.RawMessage(c.MapItem), *c.MapIndex
	}
	return vars, nil
}

// wakeAt makes the wake loop look at t (a wait this dispatcher started ends then).
func (d *Dispatcher) wakeAt(t time.Time) {
	d.mu.Lock()
	if d.nextWake.IsZero() || t.Before(d.nextWake) {
		d.nextWake = t
	}
	d.mu.Unlock()
	select {
	case d.hints.wake <- struct{}{}:
	default:
	}
}

// wakeLoop is the wake sweeper of every dispatcher (catalog.WakeDue): it ends due
// sleeps and applies due timeouts of any run, every PollInterval and when the
// earliest due wait comes (asked of the database each round, so waits started by
// other dispatchers, or before a restart, wake on time too).
func (d *Dispatcher) wakeLoop(ctx context.Context) {
	const batch = 100
	for {
		wait := d.cfg.PollInterval
		if next, err := d.store.NextWake(ctx); err == nil && !next.IsZero() {
			wait = min(wait, time.Until(next))
		}
		d.mu.Lock()
		if !d.nextWake.IsZero() {
			wait = min(wait, time.Until(d.nextWake))
			d.nextWake = time.Time{}
		}
		d.mu.Unlock()
		wait = max(wait, 5*time.Millisecond)
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-d.hints.wake:
			timer.Stop()
			continue
		case <-timer.C:
		}
		for {
			n, err := d.store.WakeDue(ctx, batch)
			if err != nil {
				d.noteDBError()
				if ctx.Err() == nil {
					d.logger.Warn("wake sweep failed", "error", err)
				}
				break
			}
			if n > 0 {
				d.metrics.woken.Add(float64(n))
				d.logger.Debug("woke waiting steps", "count", n)
				d.nudge()
			}
			if n < batch {
				break
			}
		}
		// Runs past their deadline fail (docs/flow.md, "Run deadlines").
		if n, err := d.store.RunDeadlines(ctx, batch); err != nil {
			if ctx.Err() == nil {
				d.logger.Warn("run deadline sweep failed", "error", err)
			}
		} else if n > 0 {
			d.logger.Info("failed runs past their deadline", "count", n)
		}
		// Ready steps that waited past their queue_timeout fail (docs/flow.md).
		if n, err := d.store.QueueTimeouts(ctx, batch); err != nil {
			if ctx.Err() == nil {
				d.logger.Warn("queue timeout sweep failed", "error", err)
			}
		} else if n > 0 {
			d.logger.Debug("failed steps past their queue_timeout", "count", n)
		}
	}
}
