package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/catalog/catalogtest"
	"github.com/cairnrun/cairn/internal/testenv"
)

const outageToken = "outage-operator-token-0123456789"

// logSink collects a server's JSON log lines; safe for concurrent use.
type logSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logSink) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// records returns the log lines written so far, decoded.
func (l *logSink) records(t testingT) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(l.buf.Bytes()))
	for sc.Scan() {
		var rec map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &rec), "log line %s", sc.Text())
		out = append(out, rec)
	}
	return out
}

// requireNoErrorLogs fails when a line was logged at ERROR.
func (l *logSink) requireNoErrorLogs(t *testing.T) {
	t.Helper()
	for _, rec := range l.records(t) {
		require.NotEqual(t, "ERROR", rec["level"], "logged at ERROR: %v", rec)
	}
}

// requireWarnedPerRequest fails unless msg was logged n times, each at WARN with
// its request's ID.
func (l *logSink) requireWarnedPerRequest(t *testing.T, msg string, n int) {
	t.Helper()
	warned := 0
	for _, rec := range l.records(t) {
		if rec["msg"] == msg {
			require.Equal(t, "WARN", rec["level"])
			require.NotEmpty(t, rec["request_id"])
			warned++
		}
	}
	require.Equal(t, n, warned, "one WARN line %q per request", msg)
}

// newOutageServer serves the API over store with a file blob store, logging at
// DEBUG into the returned sink.
func newOutageServer(t *testing.T, store *catalog.Store) (url string, logs *logSink) {
	t.Helper()
	blobs, err := blobstore.NewFile(t.TempDir(), nil)
	require.NoError(t, err)
	return newOutageServerWith(t, store, blobs)
}

// newOutageServerWith is newOutageServer on the blob store blobs.
func newOutageServerWith(t *testing.T, store *catalog.Store, blobs blobstore.Store) (url string, logs *logSink) {
	t.Helper()
	tokens, err := api.ParseTokens("operator:" + outageToken)
	require.NoError(t, err)
	logs = &logSink{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv := api.New(store, blobs, &api.Config{Tokens: tokens, TempDir: t.TempDir(), Logger: logger})
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return hs.URL, logs
}

// TestDatabaseUnavailable: with the database down (its port refuses connections),
// reads and writes answer 503 problems with Retry-After, logged at WARN, never at
// ERROR; /readyz answers 503 as it always did.
func TestDatabaseUnavailable(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now
	db, err := sqlx.Open("postgres", "postgres://cairn:secret@"+addr+"/cairn?sslmode=disable&connect_timeout=5")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	url, logs := newOutageServer(t, catalog.New(db, nil))

	tests := []struct {
		name, method, path, body string
		header                   http.Header
	}{
		{name: "list runs", method: http.MethodGet, path: "/v1/runs"},
		{name: "get run", method: http.MethodGet, path: "/v1/runs/0190a6b4-7c3e-7d1a-9c44-5a6e2f7b8c90"},
		{name: "start run", method: http.MethodPost, path: "/v1/workflows/wf/runs", body: `{"input":{"n":1}}`},
		{name: "start run idempotent", method: http.MethodPost, path: "/v1/workflows/wf/runs", body: `{}`,
			header: http.Header{"Idempotency-Key": {"key-1"}}},
		{name: "list workflows", method: http.MethodGet, path: "/v1/workflows"},
	}
	for _, tt := range tests {
		req, err := http.NewRequest(tt.method, url+tt.path, strings.NewReader(tt.body))
		require.NoError(t, err)
		for k, v := range tt.header {
			req.Header[k] = v
		}
		req.Header.Set("Authorization", "Bearer "+outageToken)
		if tt.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err, tt.name)
		var p api.Problem
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&p), tt.name)
		resp.Body.Close()
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s: %+v", tt.name, p)
		require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"), tt.name)
		require.Equal(t, "5", resp.Header.Get("Retry-After"), tt.name)
		require.Equal(t, "unavailable", p.Code, tt.name)
		require.Equal(t, "urn:cairn:problem:unavailable", p.Type, tt.name)
		require.NotContains(t, p.Detail, addr, "%s: no driver text in the problem", tt.name)
	}

	resp, err := http.Get(url + "/readyz")
	require.NoError(t, err)
	var ready api.Problem
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&ready))
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Equal(t, "unreachable", ready.Checks["database"])

	logs.requireNoErrorLogs(t)
	logs.requireWarnedPerRequest(t, "database unavailable", len(tests))
}

// TestClientClosedRequest: a client that gives up while its request waits on the
// database is not a server error: nothing is logged at ERROR and the access log
// shows 499.
func TestClientClosedRequest(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	url, logs := newOutageServer(t, catalog.New(db, nil))

	// Hold a lock that makes GET /v1/runs wait.
	ctx := context.Background()
	lock, err := db.BeginTxx(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lock.Rollback() })
	_, err = lock.ExecContext(ctx, `LOCK TABLE runs IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)

	reqCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(reqCtx, http.MethodGet, url+"/v1/runs", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+outageToken)
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	// Wait until the request's query waits for the lock.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var n int
		err := db.GetContext(ctx, &n, `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%FROM runs%'`)
		require.NoError(c, err)
		assert.Positive(c, n, "queries of runs waiting for a lock")
	}, 10*time.Second, 20*time.Millisecond)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)

	// Wait for the server to finish the request: its access log line.
	var access map[string]any
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, rec := range logs.records(c) {
			if rec["msg"] == "request" && rec["path"] == "/v1/runs" {
				access = rec
				return
			}
		}
		c.Errorf("no access log line of /v1/runs yet")
	}, 10*time.Second, 20*time.Millisecond)
	require.EqualValues(t, 499, access["status"])
	require.Equal(t, "INFO", access["level"])
	logs.requireNoErrorLogs(t)
	closed := false
	for _, rec := range logs.records(t) {
		closed = closed || rec["msg"] == "client closed request"
	}
	require.True(t, closed, "the abandoned request is logged as such")
}

// TestBlobStoreUnavailable: with the S3 server down (a real versitygw, stopped), the
// reads that stream a blob (a step's output, checkpoint and log) answer 503
// problems with Retry-After, as for a database outage, logged at WARN, never at
// ERROR, with no S3 text in the problem; they answer again once it is back.
func TestBlobStoreUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s3 := testenv.StartS3Process(t, "")
	blobs := s3.Store()
	store := catalog.New(testenv.DB(t), nil)
	url, logs := newOutageServerWith(t, store, blobs)

	// A step whose output, checkpoint and log are objects in the bucket.
	v := catalogtest.Version(t, store, "wf", catalog.NewStep{Key: "a", MaxAttempts: 1})
	run, _, err := store.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "wf", Version: v.Version})
	require.NoError(t, err)
	claimed, err := store.StepClaim(ctx, "test", 1, time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	c := claimed[0]
	put := func(kind, content string) blobstore.Object {
		obj, err := blobs.Put(ctx, kind, strings.NewReader(content), blobstore.PutOptions{Size: int64(len(content))})
		require.NoError(t, err)
		return obj
	}
	checkpoint := put(blobstore.KindPayloads, "checkpoint bytes")
	require.NoError(t, store.StepCheckpoint(ctx, catalog.Lease{RunID: c.RunID, Key: c.Key, Token: c.LeaseToken}, blobstore.ObjectRef(checkpoint).JSON(), nil))
	output := put(blobstore.KindPayloads, "output bytes")
	logObj := put(blobstore.KindLogs, "log line\n")
	require.NoError(t, store.StepFinish(ctx, &catalog.StepFinishParams{RunID: c.RunID, Key: c.Key, LeaseToken: c.LeaseToken,
		Outcome: catalog.OutcomeSucceeded, Output: blobstore.ObjectRef(output).JSON(), LogKey: logObj.Key}))

	paths := map[string]string{
		"output":     "/v1/runs/" + run.ID.String() + "/steps/a/output",
		"checkpoint": "/v1/runs/" + run.ID.String() + "/steps/a/checkpoint",
		"log":        "/v1/runs/" + run.ID.String() + "/steps/a/logs",
	}
	get := func(path string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, url+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+outageToken)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, b
	}
	for name, path := range paths {
		resp, body := get(path)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", name, body)
	}

	s3.Kill()
	for name, path := range paths {
		resp, body := get(path)
		var p api.Problem
		require.NoError(t, json.Unmarshal(body, &p), "%s: %s", name, body)
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s: %+v", name, p)
		require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"), name)
		require.Equal(t, "5", resp.Header.Get("Retry-After"), name)
		require.Equal(t, "unavailable", p.Code, name)
		require.Equal(t, "the blob store is unavailable; try again later", p.Detail, name)
	}
	logs.requireNoErrorLogs(t)
	logs.requireWarnedPerRequest(t, "blob store unavailable", len(paths))

	s3.Start()
	for name, path := range paths {
		resp, body := get(path)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s after the outage: %s", name, body)
	}
}
