package api

import (
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/cairnrun/cairn/functions"
	"github.com/cairnrun/cairn/internal/tracing"
)

// withTracing records a server span per request when Config.Tracer is set, a child
// of the caller's traceparent if it sent one. It wraps the mux directly: the mux
// sets the request's route pattern (the span's name) on the request it is given.
func (s *Server) withTracing(next http.Handler) http.Handler {
	t := s.cfg.Tracer
	if t == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := tracing.Propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := t.Start(ctx, r.Method, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
			attribute.String("http.request.method", r.Method), attribute.String("url.path", functions.MaskCallbackPath(r.URL.Path))))
		defer span.End()
		rec := &statusRecorder{ResponseWriter: w}
		r = r.WithContext(ctx)
		next.ServeHTTP(rec, r)
		if r.Pattern != "" {
			span.SetName(r.Pattern) // "GET /v1/runs/{id}"
			span.SetAttributes(attribute.String("http.route", r.Pattern))
		}
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		span.SetAttributes(attribute.Int("http.response.status_code", rec.status))
		if rec.status >= 500 {
			span.SetStatus(codes.Error, strconv.Itoa(rec.status))
		}
	})
}
