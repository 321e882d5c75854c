package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/expr"
	"github.com/cairnrun/cairn/functions"
)

// Child runs (docs/functions.md, "Child runs"): a workflow step runs no function.
// The dispatcher that claims it evaluates the child's input, then creates the child
// run and suspends the step in one transaction fenced by its lease
// (catalog.ChildStart); the catalog's triggers end the step when the child ends.

// Error codes of a workflow step that fails before its child starts.
const (
	// CodeChildLimit: the child would go over Config.MaxChildDepth,
	// Config.MaxChildRuns or Config.MaxTreeRuns.
	CodeChildLimit = "child_limit"
	// CodeChildNotFound: the child's workflow, version or alias does not exist.
	CodeChildNotFound = "child_not_found"
	// CodeQuotaExceeded: the child's namespace is over its runs_per_minute quota
	// (catalog.QuotaError). The attempt does not count against max_attempts: the
	// step is tried again when the quota has room (docs/flow.md, "Quotas").
	CodeQuotaExceeded = "quota_exceeded"
)

// startChild starts the child run of a claimed workflow step and suspends the step.
// A bad input expression, a limit reached or a child workflow that does not exist
// fail the step at once (not retried), as does an input the catalog refuses (code
// invalid_output); an unavailable database is retried (untilWritten); a child
// over its namespace's runs_per_minute quota is tried again after the quota's
// Retry-After, the attempt uncounted (code quota_exceeded).
func (d *Dispatcher) startChild(ctx context.Context, a *attempt, step *bundle.StepDefinition) {
	c := a.claim
	w := step.Workflow
	p := &catalog.ChildStartParams{Workflow: w.Name, Version: w.Version, Alias: w.Alias,
		MaxDepth: d.cfg.Limits.MaxChildDepth, MaxChildren: d.cfg.Limits.MaxChildRuns, MaxTreeRuns: d.cfg.Limits.MaxTreeRuns}
	if w.Input != "" {
		run, err := d.store.RunGet(ctx, c.RunID)
		if err != nil {
			d.report(a, infraOutcome(a, "read the run's labels", err), step)
			return
		}
		input, err := d.evalChildInput(ctx, c, step, run.Labels)
		if err != nil {
			d.report(a, outcome{status: catalog.OutcomeFailed,
				err: &functions.Error{Message: fmt.Sprintf("workflow.input: %v", err), Code: expr.Code}}, step)
			return
		}
		p.Input = input
	}
	a.reporting.Store(true)
	var res *catalog.ChildStartResult
	childError := func(err error) bool {
		return errors.Is(err, catalog.ErrChildLimit) || errors.Is(err, catalog.ErrChildNotFound) ||
			errors.Is(err, catalog.ErrQuotaExceeded)
	}
	var quota *catalog.QuotaError
	err := d.suspendWritten(a, "start the child run", "workflow.input", childError, func() (err error) {
		res, err = d.store.ChildStart(d.life.abandonCtx, a.lease(), p)
		return err
	})
	switch {
	case err == nil:
		d.metrics.attempts.WithLabelValues("suspended").Inc()
		a.debug("child run started", "child_run_id", res.Run, "retried", res.Retried, "reused", res.Reused)
	case errors.Is(err, catalog.ErrChildLimit):
		d.report(a, outcome{status: catalog.OutcomeFailed, err: &functions.Error{Message: err.Error(), Code: CodeChildLimit}}, step)
	case errors.As(err, &quota):
		// Back-pressure, not a fault of the step: tried again once the quota has
		// room, without counting the attempt (as an infrastructure failure).
		d.report(a, outcome{status: catalog.OutcomeInfraFailed, retryable: true, retryIn: quota.RetryAfter,
			err: &functions.Error{Message: fmt.Sprintf("child run of %s not started: %v", w.Name, quota), Retryable: true,
				Code: CodeQuotaExceeded}}, step)
	case errors.Is(err, catalog.ErrChildNotFound):
		version := "latest"
		if w.Version > 0 {
			version = fmt.Sprintf("version %d", w.Version)
		} else if w.Alias != "" {
			version = "alias " + w.Alias
		}
		d.report(a, outcome{status: catalog.OutcomeFailed, err: &functions.Error{
			Message: fmt.Sprintf("child workflow %s (%s) does not exist", w.Name, version), Code: CodeChildNotFound}}, step)
	}
}

// evalChildInput evaluates a workflow step's input expression against its scope.
func (d *Dispatcher) evalChildInput(ctx context.Context, c catalog.Claimed, step *bundle.StepDefinition, labels catalog.Labels) (json.RawMessage, error) {
	prg, err := expr.StepEnv.Compile(step.Workflow.Input)
	if err != nil {
		return nil, err
	}
	vars, err := stepVars(c, step)
	if err != nil {
		return nil, err
	}
	vars[expr.Labels] = map[string]string(labels)
	return prg.Eval(ctx, vars)
}
