package runtime_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/internal/tracing"
	"github.com/cairnrun/cairn/runtime"
)

// TestTraceAcrossDispatchers: two dispatchers, each with its own tracer (as two
// servers have), share the steps of a run; every span either records is in the run's
// trace, each attempt under its step's span, each step under the run's, and the run's
// and each step's span are recorded once in all.
func TestTraceAcrossDispatchers(t *testing.T) {
	t.Parallel()
	_, tb := setup(t)
	exps := []*tracetest.InMemoryExporter{tracetest.NewInMemoryExporter(), tracetest.NewInMemoryExporter()}
	for _, exp := range exps {
		// One attempt at a time each: the other dispatcher takes the rest.
		startDispatcher(t, tb, runtime.Config{Concurrency: 1, Tracer: tracing.NewSyncer(exp)})
	}
	var steps strings.Builder
	for i := range 4 {
		fmt.Fprintf(&steps, "  - {key: s%d, builtin: sleep, with: {duration: 300ms}}\n", i)
	}
	v := deploy(t, tb, map[string]string{"cairn.yaml": "name: two-servers\nsteps:\n" + steps.String() +
		"  - {key: join, builtin: echo, needs: [s0, s1, s2, s3]}\n"})
	id := startRun(t, tb, v, "")
	require.Equal(t, catalog.RunSucceeded, waitRun(t, tb, id, time.Minute).Status)

	runSpan := tracing.RunSpanID(id)
	count := map[string]int{}
	attemptsBy := make([]int, len(exps))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		clear(count)
		for i, exp := range exps {
			attemptsBy[i] = 0
			for _, s := range exp.GetSpans() {
				count[s.Name]++
				if strings.HasPrefix(s.Name, "attempt ") {
					attemptsBy[i]++
				}
			}
		}
		assert.Equal(c, 1, count["run two-servers"], "%v", count)
		// A step's span ends after its outcome is committed: the other dispatcher
		// may finish the join, and the run, before that.
		for _, k := range []string{"s0", "s1", "s2", "s3", "join"} {
			assert.Equal(c, 1, count["step "+k], "step %s's span, once in all: %v", k, count)
			assert.Equal(c, 1, count["attempt "+k+" #1"], "%v", count)
		}
	}, 30*time.Second, 100*time.Millisecond)
	for i, exp := range exps {
		for _, s := range exp.GetSpans() {
			assert.Equal(t, tracing.TraceID(id), s.SpanContext.TraceID(), "%s is in the run's trace", s.Name)
			switch {
			case s.Name == "run two-servers":
				assert.Equal(t, runSpan, s.SpanContext.SpanID())
				assert.False(t, s.Parent.IsValid(), "the run's span is the root")
			case strings.HasPrefix(s.Name, "step "):
				assert.Equal(t, tracing.StepSpanID(id, strings.TrimPrefix(s.Name, "step ")), s.SpanContext.SpanID())
				assert.Equal(t, runSpan, s.Parent.SpanID(), s.Name)
			case strings.HasPrefix(s.Name, "attempt "):
				key := strings.TrimSuffix(strings.TrimPrefix(s.Name, "attempt "), " #1")
				assert.Equal(t, tracing.StepSpanID(id, key), s.Parent.SpanID(), "%s on dispatcher %d is under its step", s.Name, i)
			}
		}
	}
	assert.Positive(t, attemptsBy[0], "dispatcher 0 ran attempts")
	assert.Positive(t, attemptsBy[1], "dispatcher 1 ran attempts")
}
