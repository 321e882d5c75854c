package tracing_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/internal/tracing"
)

// TestNewFromEnv: no tracer without the OTEL_* variables that ask for one; a tracer
// with an endpoint; an error for an exporter or protocol that is not built in.
func TestNewFromEnv(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		env  map[string]string
		want bool
		err  string
	}{
		{name: "nothing set", env: nil},
		{name: "endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, want: true},
		{name: "traces endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, want: true},
		{name: "otlp exporter, default endpoint", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, want: true},
		{name: "exporter none", env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}},
		{name: "sdk disabled", env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}},
		{name: "zipkin", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, err: "otlp only"},
		{name: "grpc", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, err: "http/protobuf only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr, err := tracing.New(context.Background(), func(k string) string { return tc.env[k] })
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, tr != nil)
			require.NoError(t, tr.Shutdown(context.Background()))
		})
	}
}

// TestIDs: a run's trace ID is its ID; run and step span IDs are stable and distinct.
func TestIDs(t *testing.T) {
	t.Parallel()
	run := uuid.New()
	assert.Equal(t, [16]byte(run), [16]byte(tracing.TraceID(run)))
	assert.Equal(t, tracing.StepSpanID(run, "a"), tracing.StepSpanID(run, "a"))
	assert.NotEqual(t, tracing.StepSpanID(run, "a"), tracing.StepSpanID(run, "b"))
	assert.NotEqual(t, tracing.RunSpanID(run), tracing.StepSpanID(run, ""))
	assert.True(t, tracing.RunSpanID(run).IsValid())
}
