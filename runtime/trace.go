package runtime

import (
	"context"
	"strconv"
	"time"

	"github.com/google/uuid"
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
// the end emits them, once.
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
	d.emitStepEnd(ctx, c.RunID, c.Key, e)
}

// emitStepEnd records the span of a step that ended, and its run's when the step's
// end ended the run (but a canceled run's: its cancel records it, spanLoop).
func (d *Dispatcher) emitStepEnd(ctx context.Context, run uuid.UUID, key string, e *catalog.StepTraceEnd) {
	if e.FinishedAt == nil || !e.Status.Terminal() {
		return // retried: the step goes on
	}
	failed := ""
	if e.Status != catalog.StepSucceeded {
		failed = string(e.Status)
	}
	d.cfg.Tracer.EmitStep(ctx, run, key, "step "+key, e.StartedAt, *e.FinishedAt, failed,
		attribute.String("cairn.run_id", run.String()), attribute.String("cairn.step", key),
		attribute.String("cairn.status", string(e.Status)))
	if !e.RunEnded || e.RunFinished == nil || e.RunStatus == catalog.RunCanceled {
		return
	}
	d.emitRun(ctx, run, &catalog.RunTraceEnd{Workflow: e.Workflow, Version: e.Version, Status: e.RunStatus,
		CreatedAt: e.RunCreated, FinishedAt: e.RunFinished})
}

// emitRun records the span of a run that ended, failed unless it succeeded (its
// status says how: failed or canceled).
func (d *Dispatcher) emitRun(ctx context.Context, run uuid.UUID, e *catalog.RunTraceEnd) {
	if e.FinishedAt == nil {
		return
	}
	failed := ""
	if e.Status != catalog.RunSucceeded {
		failed = string(e.Status)
	}
	d.cfg.Tracer.EmitRun(ctx, run, "run "+e.Workflow, e.CreatedAt, *e.FinishedAt, failed,
		attribute.String("cairn.run_id", run.String()), attribute.String("cairn.workflow", e.Workflow),
		attribute.Int("cairn.version", e.Version), attribute.String("cairn.status", string(e.Status)))
}

// spanBatch is how many queued span ends spanLoop takes at a time.
const spanBatch = 100

// spanLoop records the spans no attempt records (catalog.SpanEndsTake): a
// suspended step's, when the wait ends (a wake, a signal, an approval, a callback,
// a child run's or a map's end) and its run's when that ended the run; a canceled
// run's, with the cancel status. Whichever dispatcher takes an end records it,
// once. A dispatcher without a tracer only drains the queue.
func (d *Dispatcher) spanLoop(ctx context.Context) {
	t := time.NewTicker(d.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for {
			ends, err := d.store.SpanEndsTake(ctx, spanBatch)
			if err != nil {
				if ctx.Err() == nil {
					d.logger.Warn("take span ends", "error", err)
				}
				break
			}
			if d.cfg.Tracer != nil {
				for _, end := range ends {
					d.emitSpanEnd(ctx, end)
				}
			}
			if len(ends) < spanBatch {
				break
			}
		}
	}
}

func (d *Dispatcher) emitSpanEnd(ctx context.Context, end catalog.SpanEnd) {
	ctx, cancel := context.WithTimeout(ctx, traceEndTimeout)
	defer cancel()
	if end.StepKey == nil {
		e, err := d.store.RunTraceEndGet(ctx, end.RunID)
		if err != nil {
			d.logger.Warn("read the run's end for its span", "run_id", end.RunID, "error", err)
			return
		}
		d.emitRun(ctx, end.RunID, e)
		return
	}
	e, err := d.store.StepTraceEndGet(ctx, end.RunID, *end.StepKey)
	if err != nil {
		d.logger.Warn("read the step's end for its span", "run_id", end.RunID, "step", *end.StepKey, "error", err)
		return
	}
	d.emitStepEnd(ctx, end.RunID, *end.StepKey, e)
}

// endSpan ends a span, marked failed by err.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
