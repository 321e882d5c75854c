package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/catalog/catalogtest"
	"github.com/cairnrun/cairn/functions"
	"github.com/cairnrun/cairn/internal/testenv"
)

const (
	classesViewerToken = "classes-viewer-token-0123456789"
	classesSigningKey  = "classes-signing-key-0123456789abcdef"
)

// failingPuts is a blob store whose writes fail with err: what a handler does with
// an error it does not know, or knows only by its sentinel.
type failingPuts struct {
	blobstore.Store
	err error
}

func (f failingPuts) Put(context.Context, string, io.Reader, blobstore.PutOptions) (blobstore.Object, error) {
	return blobstore.Object{}, f.err
}

// classAnswer is what a client sees of an error answer.
type classAnswer struct {
	status  int
	header  http.Header
	problem api.Problem
}

func readClassAnswer(t *testing.T, resp *http.Response) classAnswer {
	t.Helper()
	defer resp.Body.Close()
	a := classAnswer{status: resp.StatusCode, header: resp.Header}
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"), "%s", body)
	require.NoError(t, json.Unmarshal(body, &a.problem), "%s", body)
	return a
}

// TestProblemClasses: for every error class, a request that the real handlers answer
// with it, and the status and code a client sees. The class alone decides the status.
func TestProblemClasses(t *testing.T) {
	t.Parallel()
	store := catalog.New(testenv.DB(t), nil)
	files, err := blobstore.NewFile(t.TempDir(), nil)
	require.NoError(t, err)
	tokens, err := api.ParseTokens("viewer:" + classesViewerToken + ",operator:" + operatorToken + ",admin:" + adminToken)
	require.NoError(t, err)
	serve := func(store *catalog.Store, blobs blobstore.Store, cfg api.Config) string {
		cfg.Tokens, cfg.SigningKey, cfg.TempDir = tokens, []byte(classesSigningKey), t.TempDir()
		hs := httptest.NewServer(api.New(store, blobs, &cfg).Handler())
		t.Cleanup(hs.Close)
		return hs.URL
	}
	srv := serve(store, files, api.Config{})
	failing := func(err error) string { return serve(store, failingPuts{Store: files, err: err}, api.Config{}) }
	slow := serve(store, files, api.Config{BodyReadTimeout: 300 * time.Millisecond, MinBodyRate: 1 << 20})

	// A database nobody listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	deadAddr := l.Addr().String()
	require.NoError(t, l.Close())
	deadDB, err := sqlx.Open("postgres", "postgres://cairn:secret@"+deadAddr+"/cairn?sslmode=disable&connect_timeout=5")
	require.NoError(t, err)
	t.Cleanup(func() { _ = deadDB.Close() })
	down := serve(catalog.New(deadDB, nil), files, api.Config{})

	do := func(method, url, token, contentType string, body []byte, header http.Header) *http.Response {
		t.Helper()
		var r io.Reader
		if body != nil {
			r = bytes.NewReader(body)
		}
		req, err := http.NewRequest(method, url, r)
		require.NoError(t, err)
		for k, v := range header {
			req.Header[k] = v
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		return resp
	}
	ok := func(resp *http.Response, want int) []byte {
		t.Helper()
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, want, resp.StatusCode, "%s", b)
		return b
	}
	bundleOf := func(name string) []byte {
		return archive(t, entry{name: "cairn.yaml", body: "name: " + name + "\nsteps:\n  - {key: greet, builtin: noop}\n"})
	}

	// A workflow and a run of it, through the API.
	ok(do(http.MethodPost, srv+"/v1/bundles", operatorToken, "application/gzip", bundleOf("hello"), nil), http.StatusCreated)
	var run struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.Unmarshal(ok(do(http.MethodPost, srv+"/v1/workflows/hello/runs", operatorToken, "application/json", []byte(`{}`), nil), http.StatusAccepted), &run))
	finished := func() *http.Response {
		var fin struct {
			ID string `json:"id"`
		}
		require.NoError(t, json.Unmarshal(ok(do(http.MethodPost, srv+"/v1/workflows/hello/runs", operatorToken, "application/json", []byte(`{}`), nil), http.StatusAccepted), &fin))
		ok(do(http.MethodPost, srv+"/v1/runs/"+fin.ID+"/cancel", operatorToken, "", nil, nil), http.StatusOK)
		return do(http.MethodPost, srv+"/v1/runs/"+fin.ID+"/cancel", operatorToken, "", nil, nil)
	}
	reusedKey := func() *http.Response {
		key := http.Header{"Idempotency-Key": {"classes-key"}}
		ok(do(http.MethodPost, srv+"/v1/workflows/hello/runs", operatorToken, "application/json", []byte(`{"input":1}`), key), http.StatusAccepted)
		return do(http.MethodPost, srv+"/v1/workflows/hello/runs", operatorToken, "application/json", []byte(`{"input":2}`), key)
	}
	// Retries, on a database of their own whose steps the catalog drives (claims
	// here would take the steps of the runs above): a run that failed after its
	// first step succeeded, and a run whose first step is running.
	retryStore := catalog.New(testenv.DB(t), nil)
	retrySrv := serve(retryStore, files, api.Config{})
	catalogtest.Version(t, retryStore, "wf", catalog.NewStep{Key: "a", MaxAttempts: 1}, catalog.NewStep{Key: "b", Needs: []string{"a"}, MaxAttempts: 1})
	catalogtest.Version(t, retryStore, "wf", catalog.NewStep{Key: "z", MaxAttempts: 1},
		catalog.NewStep{Key: "a", Needs: []string{"z"}, MaxAttempts: 1}, catalog.NewStep{Key: "b", Needs: []string{"a"}, MaxAttempts: 1})
	claimOne := func(runID uuid.UUID) catalog.Claimed {
		claimed, err := retryStore.StepClaim(context.Background(), "test", 10, time.Hour)
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		require.Equal(t, runID, claimed[0].RunID)
		return claimed[0]
	}
	failedRun, _, err := retryStore.RunCreate(context.Background(), &catalog.RunCreateParams{Workflow: "wf", Version: 1})
	require.NoError(t, err)
	c := claimOne(failedRun.ID)
	require.NoError(t, retryStore.StepFinish(context.Background(), &catalog.StepFinishParams{RunID: c.RunID, Key: c.Key, LeaseToken: c.LeaseToken, Outcome: catalog.OutcomeSucceeded, Output: []byte(`1`)}))
	c = claimOne(failedRun.ID)
	require.NoError(t, retryStore.StepFinish(context.Background(), &catalog.StepFinishParams{RunID: c.RunID, Key: c.Key, LeaseToken: c.LeaseToken, Outcome: catalog.OutcomeFailed, Error: []byte(`{"message":"x"}`)}))
	runningRun, _, err := retryStore.RunCreate(context.Background(), &catalog.RunCreateParams{Workflow: "wf", Version: 1})
	require.NoError(t, err)
	claimOne(runningRun.ID)
	// A run of namespace q, whose quota of one run a minute it takes.
	_, err = retryStore.DB().Exec(`INSERT INTO namespaces (name, created_by, updated_by, runs_per_minute) VALUES ('q', 't', 't', 1)`)
	require.NoError(t, err)
	catalogtest.Version(t, retryStore, "q/wf", catalog.NewStep{Key: "a", MaxAttempts: 1})
	quotaRun, _, err := retryStore.RunCreate(context.Background(), &catalog.RunCreateParams{Workflow: "q/wf", Version: 1})
	require.NoError(t, err)
	_, err = retryStore.DB().Exec(`UPDATE runs SET status = 'failed', finished_at = now() WHERE id = $1`, quotaRun.ID)
	require.NoError(t, err)

	// The run's step is not running: no lease credential of it is current.
	staleLease := functions.LeaseCredential([]byte(classesSigningKey), run.ID, "greet", 1)

	tests := []struct {
		code   string
		status int
		answer func() *http.Response
		check  func(t *testing.T, a classAnswer)
	}{
		{code: "bad_request", status: 400, answer: func() *http.Response {
			return do(http.MethodGet, srv+"/v1/runs/"+run.ID+"/events/stream", classesViewerToken, "", nil, http.Header{"Last-Event-Id": {"yesterday"}})
		}},
		{code: "invalid_cursor", status: 400, answer: func() *http.Response {
			return do(http.MethodGet, srv+"/v1/workflows?cursor=bm90LWEtY3Vyc29y", classesViewerToken, "", nil, nil)
		}},
		{code: "invalid_bundle", status: 400, answer: func() *http.Response {
			return do(http.MethodPost, srv+"/v1/bundles", operatorToken, "application/gzip", bundleOf("Not A Name"), nil)
		}, check: func(t *testing.T, a classAnswer) {
			require.NotEmpty(t, a.problem.Errors)
			require.Equal(t, "cairn.yaml#name", a.problem.Errors[0].Location)
		}},
		{code: "unauthorized", status: 401, answer: func() *http.Response {
			return do(http.MethodGet, srv+"/v1/runs", "", "", nil, nil)
		}},
		{code: "forbidden", status: 403, answer: func() *http.Response {
			return do(http.MethodPost, srv+"/v1/bundles", classesViewerToken, "application/gzip", bundleOf("viewer"), nil)
		}},
		{code: "not_found", status: 404, answer: func() *http.Response {
			return do(http.MethodGet, srv+"/v1/runs/"+uuid.NewString(), classesViewerToken, "", nil, nil)
		}},
		{code: "namespace_not_found", status: 404, answer: func() *http.Response {
			return do(http.MethodGet, srv+"/v1/runs", classesViewerToken, "", nil, http.Header{"Cairn-Namespace": {"nowhere"}})
		}},
		{code: "request_timeout", status: 408, answer: func() *http.Response {
			return trickleAnswer(t, slow, "POST /v1/bundles HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+operatorToken+"\r\nContent-Type: application/gzip\r\nContent-Length: 1000000\r\n\r\n")
		}},
		{code: "conflict", status: 409, answer: func() *http.Response {
			// Any write the catalog refuses as conflicting; a blob store stands in.
			return do(http.MethodPost, failing(catalog.ErrConflict)+"/v1/bundles", operatorToken, "application/gzip", bundleOf("conflict"), nil)
		}},
		{code: "idempotency_key_reused", status: 409, answer: reusedKey},
		{code: "run_finished", status: 409, answer: finished},
		{code: "invalid_run_state", status: 409, answer: func() *http.Response {
			return do(http.MethodPost, retrySrv+"/v1/runs/"+runningRun.ID.String()+"/retry", operatorToken, "application/json", []byte(`{}`), nil)
		}, check: func(t *testing.T, a classAnswer) {
			require.Equal(t, "run "+runningRun.ID.String()+" is running: only a failed or canceled run can be retried", a.problem.Detail)
		}},
		{code: "callback_not_waiting", status: 409, answer: func() *http.Response {
			// A genuine token of a step that never waited for a callback.
			token := functions.CallbackToken([]byte(classesSigningKey), uuid.MustParse(run.ID).String(), "greet", 1)
			return do(http.MethodPost, srv+"/v1/callbacks/"+token, "", "application/json", []byte(`{"n":1}`), nil)
		}, check: func(t *testing.T, a classAnswer) {
			require.Contains(t, a.problem.Detail, "no longer waits for the callback of attempt 1")
		}},
		{code: "incompatible_version", status: 409, answer: func() *http.Response {
			return do(http.MethodPost, retrySrv+"/v1/runs/"+failedRun.ID.String()+"/retry", operatorToken, "application/json", []byte(`{"version":2}`), nil)
		}, check: func(t *testing.T, a classAnswer) {
			require.Contains(t, a.problem.Detail, "a (needs nothing in the run, z in version 2)")
		}},
		{code: "quota_exceeded", status: 429, answer: func() *http.Response {
			return do(http.MethodPost, retrySrv+"/v1/runs/"+quotaRun.ID.String()+"/rerun", operatorToken, "application/json", []byte(`{"from_step":"a"}`), nil)
		}},
		{code: "nothing_to_roll_back", status: 409, answer: func() *http.Response {
			// hello has one version: latest has nothing before it.
			return do(http.MethodPost, srv+"/v1/workflows/hello/aliases/latest/rollback", operatorToken, "", nil, nil)
		}, check: func(t *testing.T, a classAnswer) {
			require.Contains(t, a.problem.Detail, "names version 1")
		}},
		{code: "lease_lost", status: 409, answer: func() *http.Response {
			return do(http.MethodPut, srv+"/v1/runs/"+run.ID+"/steps/greet/checkpoint", staleLease, "application/json", []byte(`{"n":1}`), nil)
		}},
		{code: "payload_too_large", status: 413, answer: func() *http.Response {
			return do(http.MethodPost, srv+"/v1/workflows/hello/runs", operatorToken, "application/json", []byte(`{"input":"`+strings.Repeat("x", 2<<20)+`"}`), nil)
		}},
		{code: "unsupported_media_type", status: 415, answer: func() *http.Response {
			return do(http.MethodPost, srv+"/v1/workflows/hello/runs", operatorToken, "application/xml", []byte(`<input/>`), nil)
		}},
		{code: "validation_failed", status: 422, answer: func() *http.Response {
			return do(http.MethodGet, srv+"/v1/runs?limit=0", classesViewerToken, "", nil, nil)
		}, check: func(t *testing.T, a classAnswer) {
			require.Equal(t, "query.limit", a.problem.Errors[0].Location)
		}},
		{code: "internal", status: 500, answer: func() *http.Response {
			return do(http.MethodPost, failing(errors.New("disk on fire under /var/lib/cairn"))+"/v1/bundles", operatorToken, "application/gzip", bundleOf("internal"), nil)
		}, check: func(t *testing.T, a classAnswer) {
			// Only the request ID: nothing of the error.
			require.Equal(t, a.header.Get(api.RequestIDHeader), a.problem.Instance)
			require.NotContains(t, a.problem.Detail, "disk")
			require.Empty(t, a.problem.Errors)
		}},
		{code: "unavailable", status: 503, answer: func() *http.Response {
			return do(http.MethodGet, down+"/v1/runs", classesViewerToken, "", nil, nil)
		}, check: func(t *testing.T, a classAnswer) {
			require.Equal(t, "5", a.header.Get("Retry-After"))
			require.NotContains(t, a.problem.Detail, deadAddr)
		}},
		{code: "secret_key_missing", status: 503, answer: func() *http.Response {
			return do(http.MethodPut, srv+"/v1/secrets/github", adminToken, "application/json", []byte(`{"value":"x"}`), nil)
		}, check: func(t *testing.T, a classAnswer) {
			require.Contains(t, a.problem.Detail, "CAIRN_SECRET_KEY")
		}},
		{code: "timeout", status: 504, answer: func() *http.Response {
			return do(http.MethodPost, failing(fmt.Errorf("put: %w", context.DeadlineExceeded))+"/v1/bundles", operatorToken, "application/gzip", bundleOf("timeout"), nil)
		}},
	}
	// client_closed_request has no answer anybody reads: TestClientClosedRequest
	// finds it in the access log.
	tested := map[string]int{"client_closed_request": 499}
	for _, tt := range tests {
		tested[tt.code] = tt.status
		t.Run(tt.code, func(t *testing.T) {
			a := readClassAnswer(t, tt.answer())
			require.Equal(t, tt.status, a.status, "%+v", a.problem)
			require.Equal(t, tt.status, a.problem.Status)
			require.Equal(t, tt.code, a.problem.Code, "%+v", a.problem)
			require.Equal(t, "urn:cairn:problem:"+tt.code, a.problem.Type)
			require.NotEmpty(t, a.problem.Title)
			if tt.check != nil {
				tt.check(t, a)
			}
		})
	}
	require.Equal(t, api.ProblemClassCodes(), tested, "every error class has a case here")
}

// trickleAnswer sends head and then a byte of the body, and nothing more; it returns
// the server's answer.
func trickleAnswer(t *testing.T, base, head string) *http.Response {
	t.Helper()
	u, err := url.Parse(base)
	require.NoError(t, err)
	conn, err := net.Dial("tcp", u.Host)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	_, err = io.WriteString(conn, head+"x")
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(30*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	return resp
}
