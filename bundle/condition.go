package bundle

import (
	"fmt"
	"strings"

	"github.com/cairnrun/cairn/expr"
)

// Conditions, trigger rules and failure handling (docs/functions.md):
//
//   - when: a CEL condition over the step's scope (expr.StepEnv), evaluated once
//     when the step is ready; false skips the step (reason condition_false) without
//     an attempt, and never counts as a failure.
//   - after: the step's trigger rule, decided in the catalog when its upstream
//     steps settle (TriggerRule).
//   - compensate: a step-like body run, when the run fails, for each step that
//     succeeded, in reverse completion order, as step CompensateKey(key).
//   - on_failure: steps run once when a run fails, after the compensations, with
//     "failure" in their envelope.

// TriggerRule says when a step runs, given how the steps it needs ended. A step
// whose rule can no longer hold is skipped (reason upstream_failed,
// upstream_skipped or no_upstream_failed), never left waiting.
type TriggerRule string

// The trigger rules.
const (
	// AfterAllSucceeded (the default): every upstream step succeeded. The step is
	// skipped as soon as one fails or is skipped.
	AfterAllSucceeded TriggerRule = "all_succeeded"
	// AfterAllDone: every upstream step ended, however.
	AfterAllDone TriggerRule = "all_done"
	// AfterNoneFailed: every upstream step ended and none failed (skipped ones do
	// not stop it). The step is skipped as soon as one fails.
	AfterNoneFailed TriggerRule = "none_failed"
	// AfterAnyFailed: every upstream step ended and at least one failed.
	AfterAnyFailed TriggerRule = "any_failed"
)

// TriggerRules lists the trigger rules.
var TriggerRules = []TriggerRule{AfterAllSucceeded, AfterAllDone, AfterNoneFailed, AfterAnyFailed}

// compensatePrefix begins the key of a compensation step.
const compensatePrefix = "compensate-"

// CompensateKey is the key of the step that compensates step key in a run:
// "compensate-<key>". Validate refuses a manifest where it is too long or taken.
func CompensateKey(key string) string { return compensatePrefix + key }

// Rule returns the step's trigger rule, AfterAllSucceeded when unset.
func (d *StepDefinition) Rule() TriggerRule {
	if d.After == "" {
		return AfterAllSucceeded
	}
	return d.After
}

// normalizeConditions fills d's when, after and compensate from s.
func normalizeConditions(s *Step, d *StepDefinition, timeout Duration, defaults RetryPolicy) error {
	d.When = s.When
	if s.After != AfterAllSucceeded {
		d.After = s.After
	}
	if s.Compensate == nil {
		return nil
	}
	body := *s.Compensate
	body.Key, body.Needs = CompensateKey(s.Key), []string{s.Key}
	c, err := normalizeStep(body, timeout, defaults)
	if err != nil {
		return err
	}
	d.Compensate = &c
	return nil
}

// conditions checks a step's when, after and compensate.
func (v *validator) conditions(f string, s Step, keys map[string]int) {
	if s.When != "" {
		if err := expr.StepEnv.Check(s.When); err != nil {
			v.add(s.Key, f+".when", "bad expression: %v", err)
		}
	}
	switch s.After {
	case "", AfterAllSucceeded, AfterAllDone, AfterNoneFailed, AfterAnyFailed:
	default:
		v.add(s.Key, f+".after", "unknown trigger rule %q (known: %s)", s.After, joinRules())
	}
	if s.After != "" && len(s.Needs) == 0 {
		v.add(s.Key, f+".after", "needs no step: a trigger rule has nothing to follow")
	}
	if s.Compensate == nil {
		return
	}
	cf := f + ".compensate"
	ck := CompensateKey(s.Key)
	if len(ck) > 63 {
		v.add(s.Key, cf, "its compensation runs as step %q, over 63 characters: shorten the key %q", ck, s.Key)
	} else if _, taken := keys[ck]; taken {
		v.add(s.Key, cf, "its compensation runs as step %q, which is the key of another step", ck)
	}
	v.handler(s.Key, cf, *s.Compensate, "a compensation")
}

// handler checks a step-like body that runs a function outside the DAG (a
// compensate body, an on_failure step): a function kind (exec, http, lambda,
// builtin), no place in the DAG (needs, when, after) and no compensation of its
// own.
func (v *validator) handler(key, f string, h Step, what string) {
	if h.Key != "" && strings.HasSuffix(f, ".compensate") {
		v.add(key, f+".key", "%s has no key of its own (it runs as %q)", what, CompensateKey(key))
	}
	if len(h.Needs) > 0 {
		v.add(key, f+".needs", "%s cannot need steps: it runs after the run failed", what)
	}
	if h.When != "" {
		v.add(key, f+".when", "%s cannot have a condition", what)
	}
	if h.After != "" {
		v.add(key, f+".after", "%s cannot have a trigger rule", what)
	}
	if h.Compensate != nil {
		v.add(key, f+".compensate", "%s cannot have a compensation", what)
	}
	var kinds []string
	if h.Exec != nil {
		kinds = append(kinds, "exec")
		v.exec(key, f+".exec", h.Exec)
	}
	if h.HTTP != nil {
		kinds = append(kinds, "http")
		v.http(key, f+".http", h.HTTP)
	}
	if h.Lambda != nil {
		kinds = append(kinds, "lambda")
		v.lambda(key, f+".lambda", h.Lambda)
	}
	if h.Builtin != "" {
		kinds = append(kinds, "builtin")
		v.builtin(key, f, h.Builtin, h.With)
	}
	if h.Sleep != nil {
		v.add(key, f+".sleep", "%s runs a function: it cannot be a sleep (use exec, http, lambda or builtin)", what)
	}
	if h.Signal != nil {
		v.add(key, f+".signal", "%s runs a function: it cannot wait for a signal (use exec, http, lambda or builtin)", what)
	}
	if h.Approval != nil {
		v.add(key, f+".approval", "%s runs a function: it cannot wait for an approval (use exec, http, lambda or builtin)", what)
	}
	switch {
	case len(kinds) > 1:
		v.add(key, f, "%s sets %s: set exactly one of exec, http, lambda, builtin", what, strings.Join(kinds, " and "))
	case len(kinds) == 0 && h.Sleep == nil && h.Signal == nil:
		v.add(key, f, "%s has no function: set exactly one of exec, http, lambda, builtin", what)
	}
	v.network(key, f, h.Network, h.Exec != nil)
	v.stepEnv(key, f, h)
	v.resources(key, f, h)
	v.flow(key, f, h)
	if h.With != nil {
		if _, err := normalizeWith(h.With); err != nil {
			v.add(key, f+".with"+err.at, "%s", err.msg)
		}
	}
	if h.Timeout != nil {
		v.timeout(key, f+".timeout", *h.Timeout)
	}
	if h.Retry != nil {
		v.retry(key, f+".retry", *h.Retry, v.defaults)
		if h.Retry.OnExhausted == OnExhaustedPause {
			v.add(key, f+".retry.on_exhausted", "%s runs after the run failed: it cannot pause the run (on_exhausted: fail)", what)
		}
	}
}

// onFailure checks the on_failure steps: each a keyed function step, its key
// unique among the steps, the compensations and the other on_failure steps.
func (v *validator) onFailure(steps []Step, keys map[string]int, compensations map[string]string) {
	seen := map[string]int{}
	for i, s := range steps {
		f := fmt.Sprintf("on_failure[%d]", i)
		switch {
		case s.Key == "":
			v.add("", f+".key", "required")
		case !reKey.MatchString(s.Key):
			v.add(s.Key, f+".key", "%q must be 1 to 63 lower-case letters, digits, '_' and '-', starting with a letter or digit", s.Key)
		default:
			if j, dup := keys[s.Key]; dup {
				v.add(s.Key, f+".key", "duplicate step key %q (used by steps[%d])", s.Key, j)
			} else if owner, dup := compensations[s.Key]; dup {
				v.add(s.Key, f+".key", "step key %q is the compensation of step %q", s.Key, owner)
			} else if j, dup := seen[s.Key]; dup {
				v.add(s.Key, f+".key", "duplicate step key %q (first used by on_failure[%d])", s.Key, j)
			} else {
				seen[s.Key] = i
			}
		}
		v.handler(s.Key, f, s, "an on_failure step")
	}
}

func joinRules() string {
	names := make([]string, len(TriggerRules))
	for i, r := range TriggerRules {
		names[i] = string(r)
	}
	return strings.Join(names, ", ")
}
