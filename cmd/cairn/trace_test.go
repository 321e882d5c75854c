package main

import (
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an in-process OTLP/HTTP trace receiver: it decodes the protobuf
// export requests and keeps their spans.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "not an OTLP/HTTP protobuf trace export", http.StatusNotFound)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			o.spans = append(o.spans, ss.GetSpans()...)
		}
	}
	o.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (o *otlpReceiver) all() []*tracepb.Span {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]*tracepb.Span(nil), o.spans...)
}

// TestTraces: with OTEL_EXPORTER_OTLP_ENDPOINT set, a run of a hello-like workflow
// (two greetings in parallel over http, joined) is one trace, whose ID is the run's:
// the run's span, a span per step under it, a span per attempt under its step (with
// claim, invoke and store output under it); the http function received the
// traceparent of its attempt's invoke span; and the request that started the run has
// its own span, linked to the run's trace.
func TestTraces(t *testing.T) {
	t.Parallel()
	recv := &otlpReceiver{}
	collector := httptest.NewServer(recv)
	t.Cleanup(collector.Close)
	var fnMu sync.Mutex
	traceparents := map[string]string{} // step → traceparent received
	fn := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fnMu.Lock()
		traceparents[r.Header.Get("Cairn-Step")] = r.Header.Get("Traceparent")
		fnMu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"greeting":"hello"}`)
	}))
	t.Cleanup(fn.Close)

	vars := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL, "OTEL_SERVICE_NAME": "cairn-test"}
	b := setupCLIWith(t, func(p *serverParts) {
		p.getenv = func(k string) string { return vars[k] }
		p.rt.httpAllowLocal = true
	})
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cairn.yaml"), []byte(fmt.Sprintf(`name: traced-hello
steps:
  - {key: greet-en, http: {url: %q}}
  - {key: greet-fr, http: {url: %q}}
  - {key: join, needs: [greet-en, greet-fr], builtin: echo}
`, fn.URL, fn.URL)), 0o644))
	b.mustCLI(t, "deploy", dir)
	id := uuid.MustParse(strings.TrimSpace(b.mustCLI(t, "run", "start", "traced-hello")))
	require.Contains(t, b.mustCLI(t, "run", "watch", id.String()), "run.succeeded")

	traceID := id[:]
	var inTrace []*tracepb.Span
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		inTrace = inTrace[:0]
		for _, s := range recv.all() {
			if string(s.GetTraceId()) == string(traceID) {
				inTrace = append(inTrace, s)
			}
		}
		names := map[string]int{}
		for _, s := range inTrace {
			names[s.GetName()]++
		}
		assert.Equal(c, 1, names["run traced-hello"], "spans: %v", names)
		for _, k := range []string{"greet-en", "greet-fr", "join"} {
			assert.Equal(c, 1, names["step "+k], "spans: %v", names)
			assert.Equal(c, 1, names["attempt "+k+" #1"], "spans: %v", names)
		}
	}, 30*time.Second, 200*time.Millisecond, "the spans of the run did not all arrive")

	byID := map[string]*tracepb.Span{}
	for _, s := range inTrace {
		byID[string(s.GetSpanId())] = s
	}
	parentName := func(s *tracepb.Span) string {
		if p := byID[string(s.GetParentSpanId())]; p != nil {
			return p.GetName()
		}
		return ""
	}
	var run *tracepb.Span
	for _, s := range inTrace {
		switch name := s.GetName(); {
		case name == "run traced-hello":
			run = s
			assert.Empty(t, s.GetParentSpanId(), "the run's span is the root of its trace")
		case strings.HasPrefix(name, "step "):
			assert.Equal(t, "run traced-hello", parentName(s), name)
		case strings.HasPrefix(name, "attempt "):
			key := strings.TrimSuffix(strings.TrimPrefix(name, "attempt "), " #1")
			assert.Equal(t, "step "+key, parentName(s), name)
		case name == "claim" || name == "invoke" || name == "store output":
			assert.True(t, strings.HasPrefix(parentName(s), "attempt "), "%s under %q", name, parentName(s))
		default:
			t.Errorf("unexpected span %q in the run's trace", name)
		}
	}
	require.NotNil(t, run)
	assert.LessOrEqual(t, run.GetStartTimeUnixNano(), run.GetEndTimeUnixNano())

	// Each http function got the traceparent of its attempt's invoke span.
	fnMu.Lock()
	defer fnMu.Unlock()
	for _, k := range []string{"greet-en", "greet-fr"} {
		tp := traceparents[k]
		parts := strings.Split(tp, "-")
		require.Len(t, parts, 4, "traceparent of %s: %q", k, tp)
		assert.Equal(t, hex.EncodeToString(traceID), parts[1], "the traceparent of %s is in the run's trace", k)
		invoke := byID[string(mustHex(t, parts[2]))]
		require.NotNil(t, invoke, "the traceparent of %s names no span of the trace", k)
		assert.Equal(t, "invoke", invoke.GetName())
		assert.Equal(t, "attempt "+k+" #1", parentName(invoke))
	}

	// The API request that started the run has its span, linked to the run's trace.
	var start *tracepb.Span
	for _, s := range recv.all() {
		if s.GetName() == "POST /v1/workflows/{name}/runs" {
			start = s
		}
	}
	require.NotNil(t, start, "no span for the request that started the run")
	require.Len(t, start.GetLinks(), 1)
	assert.Equal(t, traceID, start.GetLinks()[0].GetTraceId())
	assert.Equal(t, run.GetSpanId(), start.GetLinks()[0].GetSpanId())
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	require.NoError(t, err)
	return b
}
