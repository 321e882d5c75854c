// Package tracing sets up OpenTelemetry traces from the standard OTEL_* variables and
// gives runs, steps and attempts trace identities that every server derives alike.
//
// A run's trace ID is its run ID (both are 16 bytes), and the span IDs of the run and
// of each step are hashes of the run ID and the step key. So a dispatcher on any
// server joins an attempt to its run's trace without reading anything from the
// catalog, and each of the run and step spans is emitted once, by the dispatcher that
// records its end (or, for ends no attempt records, the span exporter of package
// maintenance), with its real start and end times (ends.go).
//
// A nil *Tracer traces nothing, and its methods return at once: tracing off costs a
// nil check on the attempt path.
package tracing

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Tracer makes Cairn's spans. A nil *Tracer is off.
type Tracer struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
}

// Propagator is the W3C trace context propagator (traceparent, tracestate).
var Propagator = propagation.TraceContext{}

// Enabled reports whether getenv asks for traces: OTEL_TRACES_EXPORTER is otlp, or
// it is unset and an OTLP endpoint is (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT). OTEL_SDK_DISABLED=true turns it off.
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	switch strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))) {
	case "otlp":
		return true
	case "":
		return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	default:
		return false
	}
}

// New returns a Tracer exporting over OTLP/HTTP (protobuf) as the OTEL_* variables
// read through getenv say, or nil (off) when they ask for no traces (see Enabled).
// The exporter's other settings (OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT, _COMPRESSION,
// certificates), the sampler (OTEL_TRACES_SAMPLER) and the batching (OTEL_BSP_*) are
// read from the process environment by the OpenTelemetry SDK. Only the http/protobuf
// protocol is built in; OTEL_TRACES_EXPORTER other than otlp or none is an error.
func New(ctx context.Context, getenv func(string) string) (*Tracer, error) {
	exp := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")))
	if exp != "" && exp != "otlp" && exp != "none" {
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: cairn exports traces over otlp only (or none)", exp)
	}
	if !Enabled(getenv) {
		return nil, nil
	}
	proto := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if proto != "" && proto != "http/protobuf" {
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%s: cairn exports traces over http/protobuf only", proto)
	}
	var opts []otlptracehttp.Option
	if u := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); u != "" {
		opts = append(opts, otlptracehttp.WithEndpointURL(u))
	} else if u := getenv("OTEL_EXPORTER_OTLP_ENDPOINT"); u != "" {
		// The signal's path goes after the generic endpoint (the OTLP exporter spec).
		if _, err := url.Parse(u); err != nil {
			return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_ENDPOINT: %w", err)
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(strings.TrimRight(u, "/")+"/v1/traces"))
	}
	exporter, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("otlp trace exporter: %w", err)
	}
	service := getenv("OTEL_SERVICE_NAME")
	if service == "" {
		service = "cairn"
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", service)))
	if err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	return newTracer(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res)), nil
}

// NewSyncer returns a Tracer that hands each span to exp as it ends (no batching):
// for tests, with an in-memory exporter.
func NewSyncer(exp sdktrace.SpanExporter) *Tracer {
	return newTracer(sdktrace.WithSyncer(exp))
}

func newTracer(opts ...sdktrace.TracerProviderOption) *Tracer {
	tp := sdktrace.NewTracerProvider(append(opts, sdktrace.WithIDGenerator(idGenerator{}))...)
	return &Tracer{provider: tp, tracer: tp.Tracer("github.com/cairnrun/cairn")}
}

// Shutdown flushes the spans not yet exported and stops the exporter. Safe on nil.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// ForceFlush exports the spans ended so far. Safe on nil.
func (t *Tracer) ForceFlush(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.ForceFlush(ctx)
}

// Start starts a span, a child of the span in ctx (if any). On a nil Tracer it
// returns ctx and a span that records nothing.
func (t *Tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if t == nil {
		return ctx, trace.SpanFromContext(ctx)
	}
	return t.tracer.Start(ctx, name, opts...)
}

// TraceID is the trace ID of a run: its ID.
func TraceID(run uuid.UUID) trace.TraceID { return trace.TraceID(run) }

// RunSpanID is the span ID of a run's span.
func RunSpanID(run uuid.UUID) trace.SpanID { return hashID("run", run, "") }

// StepSpanID is the span ID of a step's span.
func StepSpanID(run uuid.UUID, key string) trace.SpanID { return hashID("step", run, key) }

func hashID(kind string, run uuid.UUID, key string) trace.SpanID {
	h := sha256.New()
	h.Write([]byte(kind))
	h.Write(run[:])
	h.Write([]byte(key))
	var id trace.SpanID
	copy(id[:], h.Sum(nil))
	if !id.IsValid() {
		id[7] = 1
	}
	return id
}

// RunContext is ctx with the run's span as the remote parent.
func RunContext(ctx context.Context, run uuid.UUID) context.Context {
	return trace.ContextWithRemoteSpanContext(ctx, spanContext(run, RunSpanID(run)))
}

// StepContext is ctx with the step's span as the remote parent.
func StepContext(ctx context.Context, run uuid.UUID, key string) context.Context {
	return trace.ContextWithRemoteSpanContext(ctx, spanContext(run, StepSpanID(run, key)))
}

func spanContext(run uuid.UUID, span trace.SpanID) trace.SpanContext {
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: TraceID(run), SpanID: span, TraceFlags: trace.FlagsSampled, Remote: true,
	})
}

// EmitRun records a run's span, the root of its trace, from start to end; failed
// (non-empty) is its error status.
func (t *Tracer) EmitRun(ctx context.Context, run uuid.UUID, name string, start, end time.Time, failed string, attrs ...attribute.KeyValue) {
	if t == nil {
		return
	}
	ctx = context.WithValue(ctx, fixedIDKey{}, fixedID{TraceID(run), RunSpanID(run)})
	t.emit(ctx, name, start, end, failed, []trace.SpanStartOption{trace.WithNewRoot(), trace.WithAttributes(attrs...)})
}

// EmitStep records a step's span, a child of its run's, from start to end; failed
// (non-empty) is its error status.
func (t *Tracer) EmitStep(ctx context.Context, run uuid.UUID, key, name string, start, end time.Time, failed string, attrs ...attribute.KeyValue) {
	if t == nil {
		return
	}
	ctx = context.WithValue(RunContext(ctx, run), fixedIDKey{}, fixedID{TraceID(run), StepSpanID(run, key)})
	t.emit(ctx, name, start, end, failed, []trace.SpanStartOption{trace.WithAttributes(attrs...)})
}

// emit starts and ends a span at once, with the given times. The fixed IDs in ctx
// reach only this span: no child is started from its context.
func (t *Tracer) emit(ctx context.Context, name string, start, end time.Time, failed string, opts []trace.SpanStartOption) {
	_, span := t.tracer.Start(ctx, name, append(opts, trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindInternal))...)
	if failed != "" {
		span.SetStatus(codes.Error, failed)
	}
	span.End(trace.WithTimestamp(end))
}

// LinkRun links the span in ctx (a request that started a run) to the run's trace,
// which is the run's own (its trace ID is the run ID). A no-op when not tracing.
func LinkRun(ctx context.Context, run uuid.UUID) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.AddLink(trace.Link{SpanContext: spanContext(run, RunSpanID(run))})
	span.SetAttributes(attribute.String("cairn.run_id", run.String()))
}

// Traceparent is the W3C traceparent header of the span in ctx ("" without one).
func Traceparent(ctx context.Context) string {
	carrier := propagation.MapCarrier{}
	Propagator.Inject(ctx, carrier)
	return carrier.Get("traceparent")
}

type fixedIDKey struct{}

type fixedID struct {
	trace trace.TraceID
	span  trace.SpanID
}

// idGenerator gives the span started with WithSpanID its fixed IDs, and every other
// span random ones.
type idGenerator struct{}

func (idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if f, ok := ctx.Value(fixedIDKey{}).(fixedID); ok {
		return f.trace, f.span
	}
	var tid trace.TraceID
	binary.BigEndian.PutUint64(tid[:8], rand.Uint64())
	binary.BigEndian.PutUint64(tid[8:], rand.Uint64()|1)
	return tid, randomSpanID()
}

func (idGenerator) NewSpanID(ctx context.Context, traceID trace.TraceID) trace.SpanID {
	if f, ok := ctx.Value(fixedIDKey{}).(fixedID); ok && f.trace == traceID {
		return f.span
	}
	return randomSpanID()
}

func randomSpanID() trace.SpanID {
	var sid trace.SpanID
	binary.BigEndian.PutUint64(sid[:], rand.Uint64()|1)
	return sid
}
