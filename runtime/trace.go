package runtime

import (
	"context"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/internal/tracing"
)

// traceEndTimeout bounds the catalog read behind a step's and a run's spans.
const traceEndTimeout = 5 * time.Second

// traceAttempt starts the attempt's span, a child of its step's span in the run's
// trace (tracing.StepContext: the same IDs on every server), from the claim on, with
// the claim as its first child. It returns ctx with the attempt's span.
func (d *Dispatcher) traceAttempt(ctx context.Context, a *attempt) context.Context {
	c := a.claim
	ctx, a.span = d.cfg.Tracer.Start(tracing.StepContext(ctx, c.RunID, c.Key), "attempt "+c.Key+" #"+strconv.Itoa(c.Attempt),
		trace.WithTimestamp(a.claimStart), trace.WithAttributes(
			attribute.String("cairn.run_id", c.RunID.String()), attribute.String("cairn.workflow", c.Workflow),
			attribute.Int("cairn.version", c.Version), attribute.String("cairn.step", c.Key),
			attribute.Int("cairn.attempt", c.Attempt), attribute.String("cairn.dispatcher", d.cfg.ID),
			attribute.Float64("cairn.queue_wait_seconds", c.QueueWait)))
	_, claim := d.cfg.Tracer.Start(ctx, "claim", trace.WithTimestamp(a.claimStart))
	claim.End(trace.WithTimestamp(a.start))
	return ctx
}

// traceEnd ends the attempt's span with its outcome once it is recorded, and when
// that ended the step (and the run), records their spans: whichever server records
// the end emits them, once (tracing.Tracer.EmitStepEnd).
func (d *Dispatcher) traceEnd(a *attempt, out outcome) {
	a.span.SetAttributes(attribute.String("cairn.outcome", string(out.status)))
	if out.err != nil && out.status != catalog.OutcomeSucceeded {
		a.span.SetStatus(codes.Error, out.err.Message)
	}
	a.span.End()
	if out.status == catalog.OutcomeHandback {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), traceEndTimeout)
	defer cancel()
	c := a.claim
	e, err := d.store.StepTraceEndGet(ctx, c.RunID, c.Key)
	if err != nil {
		a.logger().Warn("read the step's end for its span", "error", err)
		return
	}
	d.cfg.Tracer.EmitStepEnd(ctx, c.RunID, c.Key, e)
}

// endSpan ends a span, marked failed by err.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
