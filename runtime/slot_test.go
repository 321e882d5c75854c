package runtime_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/functions"
	"github.com/cairnrun/cairn/runtime"
)

// TestConcurrencyBoundsHandlers: an attempt gives its slot back once its
// handler returns (its outcome still to be committed), but handlers running at
// once never exceed Config.Concurrency: 30 runs of an HTTP step through a
// dispatcher of concurrency 2 see at most 2 requests in flight, and all succeed.
func TestConcurrencyBoundsHandlers(t *testing.T) {
	t.Parallel()
	_, tb := setup(t)
	var inFlight, peak, calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		calls.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		time.Sleep(5 * time.Millisecond)
		inFlight.Add(-1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(srv.Close)
	httpInvoker := functions.NewHTTP(&functions.HTTPConfig{SigningKey: []byte("0123456789abcdef0123456789abcdef"), AllowLocal: true})
	startDispatcher(t, tb, runtime.Config{Concurrency: 2,
		Handlers: runtime.HandlerConfig{Invokers: map[bundle.Kind]functions.Invoker{bundle.KindHTTP: httpInvoker}}})
	v := deploy(t, tb, map[string]string{"cairn.yaml": `
name: bounded
steps:
  - {key: call, http: {url: "` + srv.URL + `/x"}}
  - {key: after, needs: [call], builtin: noop}
`})
	var ids []uuid.UUID
	for range 30 {
		ids = append(ids, startRun(t, tb, v, ""))
	}
	for _, id := range ids {
		require.Equal(t, catalog.RunSucceeded, waitRun(t, tb, id, time.Minute).Status)
	}
	require.EqualValues(t, 30, calls.Load())
	require.LessOrEqual(t, peak.Load(), int64(2), "handlers in flight at once")
}
