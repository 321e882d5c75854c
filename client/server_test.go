package client_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/client"
	"github.com/cairnrun/cairn/internal/testenv"
	"github.com/cairnrun/cairn/runtime"
)

const operatorToken = "client-test-operator-token-0123456789"

// testBundle is a real Cairn server (API and dispatcher, in process) on a fresh
// database, and a client of it.
type testBundle struct {
	cl    *client.Client
	url   string
	store *catalog.Store
	blobs blobstore.Store

	// configure changes the API servers' configuration.
	configure []func(*api.Config)
	// refuseStreams answers that many of the next event stream requests with a 503
	// and Retry-After: 1, as a server at its maximum of streams does.
	refuseStreams int

	mu       sync.Mutex
	hs       *httptest.Server
	srv      *api.Server
	requests []recorded
}

// recorded is a request the server had, and the status of its answer.
type recorded struct {
	path, query, lastEventID string
	status                   *statusWriter
}

// statusWriter remembers the status of an answer.
type statusWriter struct {
	http.ResponseWriter
	mu   sync.Mutex
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.mu.Lock()
	if w.code == 0 {
		w.code = code
	}
	w.mu.Unlock()
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK) // a no-op once a status is set
	return w.ResponseWriter.Write(p)
}

// Flush keeps event streams streaming through the wrapper.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Status is the answer's status, 0 before it is sent.
func (w *statusWriter) Status() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.code
}

// setup starts a server and a dispatcher on a fresh migrated database and a file
// blob store, and stops them when the test ends. configure, when given, changes
// the API server's configuration.
func setup(t *testing.T, configure ...func(*api.Config)) *testBundle {
	t.Helper()
	dbURL := testenv.DatabaseURL(t)
	ctx := context.Background()
	store, err := catalog.Open(ctx, dbURL, nil)
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	blobs, err := blobstore.NewFile(t.TempDir(), nil)
	require.NoError(t, err)

	disp, err := runtime.New(store, blobs, &runtime.Config{
		Concurrency:   8,
		PollInterval:  100 * time.Millisecond,
		ShutdownGrace: time.Second,
		DatabaseURL:   dbURL,
		Handlers:      runtime.HandlerConfig{CacheDir: t.TempDir()},
	})
	require.NoError(t, err)
	require.NoError(t, disp.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, disp.Stop(sctx))
	})

	tb := &testBundle{store: store, blobs: blobs, configure: configure}
	require.NoError(t, tb.serve("127.0.0.1:0", t.TempDir()))
	t.Cleanup(tb.stop)
	tb.cl, err = client.New(tb.url, operatorToken)
	require.NoError(t, err)
	return tb
}

// serve starts an API server on addr.
func (tb *testBundle) serve(addr, tempDir string) error {
	tokens, err := api.ParseTokens("operator:" + operatorToken)
	if err != nil {
		return err
	}
	cfg := &api.Config{Tokens: tokens, TempDir: tempDir, Logger: slog.New(slog.DiscardHandler)}
	for _, f := range tb.configure {
		f(cfg)
	}
	srv := api.New(tb.store, tb.blobs, cfg)
	// The address of a server just closed can take a moment to be free again.
	var ln net.Listener
	for deadline := time.Now().Add(10 * time.Second); ; {
		if ln, err = net.Listen("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // nothing to poll but the address itself
	}
	if err != nil {
		return err
	}
	hs := httptest.NewUnstartedServer(tb.record(srv.Handler()))
	hs.Listener.Close()
	hs.Listener = ln
	hs.Start()
	tb.mu.Lock()
	tb.hs, tb.srv, tb.url = hs, srv, hs.URL
	tb.mu.Unlock()
	return nil
}

// stop ends the server's event streams (as `cairn serve` does at shutdown) and
// closes it.
func (tb *testBundle) stop() {
	tb.mu.Lock()
	hs, srv := tb.hs, tb.srv
	tb.mu.Unlock()
	srv.CloseStreams()
	hs.Close()
}

// restart stops the API server and starts another on the same address: its event
// streams end as they do when a server shuts down.
func (tb *testBundle) restart(tempDir string) error {
	tb.mu.Lock()
	addr := strings.TrimPrefix(tb.url, "http://")
	tb.mu.Unlock()
	tb.stop()
	return tb.serve(addr, tempDir)
}

// refuse makes the server answer the next n event stream requests with a 503 and
// Retry-After: 1.
func (tb *testBundle) refuse(n int) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.refuseStreams = n
}

// killConnections breaks every connection to the server, as a network failure does.
func (tb *testBundle) killConnections() {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.hs.CloseClientConnections()
}

// record notes every request, and refuses event streams while refuseStreams says so.
func (tb *testBundle) record(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		w = sw
		tb.mu.Lock()
		tb.requests = append(tb.requests, recorded{path: r.URL.Path, query: r.URL.RawQuery, lastEventID: r.Header.Get("Last-Event-ID"), status: sw})
		refuse := strings.HasSuffix(r.URL.Path, "/events/stream") && tb.refuseStreams > 0
		if refuse {
			tb.refuseStreams--
		}
		tb.mu.Unlock()
		if refuse {
			w.Header().Set("Content-Type", "application/problem+json")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"type":"urn:cairn:problem:unavailable","title":"Service Unavailable","status":503,"code":"unavailable","detail":"the server has its maximum of open event streams"}`))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// requestsTo returns the requests whose path ends with suffix.
func (tb *testBundle) requestsTo(suffix string) []recorded {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	var out []recorded
	for _, r := range tb.requests {
		if strings.HasSuffix(r.path, suffix) {
			out = append(out, r)
		}
	}
	return out
}

// deploy uploads a bundle made of the manifest cairn.yaml alone.
func (tb *testBundle) deploy(t *testing.T, manifest string) *client.UploadResult {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cairn.yaml"), []byte(manifest), 0o644))
	var archive bytes.Buffer
	_, err := bundle.Pack(t.Context(), dir, &archive)
	require.NoError(t, err)
	res, err := tb.cl.UploadBundle(t.Context(), &archive)
	require.NoError(t, err)
	return res
}

// start starts a run of workflow with input.
func (tb *testBundle) start(t *testing.T, workflow string, input any) uuid.UUID {
	t.Helper()
	run, err := tb.cl.CreateRun(t.Context(), workflow, client.StartRunBody{Input: input}, "")
	require.NoError(t, err)
	id, err := uuid.Parse(run.Id)
	require.NoError(t, err)
	return id
}

// chainManifest is a workflow of n sleep steps one after the other, each of d:
// a run that makes 2n+2 events over about n·d.
func chainManifest(name string, n int, d time.Duration) string {
	var b strings.Builder
	b.WriteString("name: " + name + "\nsteps:\n")
	for i := range n {
		b.WriteString("  - key: s" + string(rune('a'+i)) + "\n    builtin: sleep\n    with: {duration: " + d.String() + "}\n")
		if i > 0 {
			b.WriteString("    needs: [s" + string(rune('a'+i-1)) + "]\n")
		}
	}
	return b.String()
}
