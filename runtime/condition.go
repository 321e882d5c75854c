package runtime

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/expr"
	"github.com/cairnrun/cairn/functions"
)

// Conditions (docs/functions.md, "Conditions and trigger rules"): a step with a
// when is ready but not claimable until its condition is decided, once, by
// whichever dispatcher locks it first (catalog.ConditionsDecide): true makes it
// claimable, false skips it without an attempt, an expression that fails fails it
// (code expression). The claim loop decides before each claim, so a step whose
// condition passes is claimed in the same round.

// conditionBatch is how many conditions one transaction decides.
const conditionBatch = 100

// decideConditions decides the pending conditions, a batch at a time.
func (d *Dispatcher) decideConditions(ctx context.Context) {
	for d.claiming() {
		n, err := d.store.ConditionsDecide(ctx, conditionBatch, func(p *catalog.PendingCondition) catalog.ConditionDecision {
			return d.decide(ctx, p)
		})
		if err != nil {
			d.noteDBError()
			if ctx.Err() == nil {
				d.logger.Warn("decide conditions failed", "error", err)
			}
			return
		}
		if n > 0 {
			d.metrics.decided.Add(float64(n))
		}
		if n < conditionBatch {
			return
		}
	}
}

// decide evaluates the when of one step.
func (d *Dispatcher) decide(ctx context.Context, p *catalog.PendingCondition) catalog.ConditionDecision {
	ver, err := d.versions.get(ctx, p.Workflow, p.Version)
	if err != nil {
		d.logger.Warn("load definition to decide a condition", "run_id", p.RunID, "step", p.Key, "error", err)
		return catalog.ConditionDecision{Later: true}
	}
	step := ver.steps[p.Key]
	if step == nil || step.When == "" {
		// Not this version's step, or no condition: nothing to decide but to let
		// it run (and report what is wrong, if anything, as it does).
		return catalog.ConditionDecision{Pass: true}
	}
	pass, err := evalWhen(ctx, p, step)
	if err != nil {
		b, _ := json.Marshal(&functions.Error{Message: fmt.Sprintf("when: %v", err), Code: expr.Code})
		return catalog.ConditionDecision{Error: b}
	}
	return catalog.ConditionDecision{Pass: pass}
}

// evalWhen evaluates step's when against its scope: input, deps, params, labels
// and run.
func evalWhen(ctx context.Context, p *catalog.PendingCondition, step *bundle.StepDefinition) (bool, error) {
	prg, err := expr.StepEnv.Compile(step.When)
	if err != nil {
		return false, err
	}
	params, err := json.Marshal(step.With)
	if err != nil {
		return false, fmt.Errorf("encode params: %w", err)
	}
	input, deps := json.RawMessage(p.Input), json.RawMessage(p.Deps)
	if len(input) == 0 {
		input = json.RawMessage("null")
	}
	if len(deps) == 0 {
		deps = json.RawMessage("{}")
	}
	labels := map[string]string(p.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	return prg.EvalBool(ctx, expr.Vars{
		expr.Input:  input,
		expr.Deps:   deps,
		expr.Params: json.RawMessage(params),
		expr.Labels: labels,
		expr.Run:    map[string]any{"id": p.RunID.String(), "workflow": p.Workflow, "version": p.Version},
	})
}
