package tracing

import (
	"context"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"

	"github.com/cairnrun/cairn/catalog"
)

// EmitStepEnd records the span of a step that ended, as the catalog read it
// (catalog.Store.StepTraceEndGet), and its run's when the step's end ended the run
// (but a canceled run's: its cancel queues it, and maintenance.SpanExporter records
// it). A step that goes on (retried) records nothing. Both the dispatcher that
// records an attempt's outcome and the span exporter call it, so each span is
// recorded once, by whoever takes the end.
func (t *Tracer) EmitStepEnd(ctx context.Context, run uuid.UUID, key string, e *catalog.StepTraceEnd) {
	if t == nil || e.FinishedAt == nil || !e.Status.Terminal() {
		return // off, or retried: the step goes on
	}
	failed := ""
	if e.Status != catalog.StepSucceeded {
		failed = string(e.Status)
	}
	t.EmitStep(ctx, run, key, "step "+key, e.StartedAt, *e.FinishedAt, failed,
		attribute.String("cairn.run_id", run.String()), attribute.String("cairn.step", key),
		attribute.String("cairn.status", string(e.Status)))
	if !e.RunEnded || e.RunFinished == nil || e.RunStatus == catalog.RunCanceled {
		return
	}
	t.EmitRunEnd(ctx, run, &catalog.RunTraceEnd{Workflow: e.Workflow, Version: e.Version, Status: e.RunStatus,
		CreatedAt: e.RunCreated, FinishedAt: e.RunFinished})
}

// EmitRunEnd records the span of a run that ended, failed unless it succeeded (its
// status says how: failed or canceled); nothing for a run not finished.
func (t *Tracer) EmitRunEnd(ctx context.Context, run uuid.UUID, e *catalog.RunTraceEnd) {
	if t == nil || e.FinishedAt == nil {
		return
	}
	failed := ""
	if e.Status != catalog.RunSucceeded {
		failed = string(e.Status)
	}
	t.EmitRun(ctx, run, "run "+e.Workflow, e.CreatedAt, *e.FinishedAt, failed,
		attribute.String("cairn.run_id", run.String()), attribute.String("cairn.workflow", e.Workflow),
		attribute.Int("cairn.version", e.Version), attribute.String("cairn.status", string(e.Status)))
}
