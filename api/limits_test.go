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
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/functions"
	"github.com/cairnrun/cairn/internal/testenv"
)

const (
	limitsSigningKey = "signing-key-for-limit-tests-0123456789"
	adminToken       = "admin-token-0123456789abcdef"
	metricsToken     = "metrics-token-0123456789abcdef"
)

// setupWith serves the API with cfg (tokens, signing key and temp dir filled in).
func setupWith(t *testing.T, cfg api.Config) *testBundle {
	t.Helper()
	store := catalog.New(testenv.DB(t), nil)
	blobDir := t.TempDir()
	blobs, err := blobstore.NewFile(blobDir, nil)
	require.NoError(t, err)
	tokens, err := api.ParseTokens("operator:" + operatorToken + ",admin:" + adminToken)
	require.NoError(t, err)
	cfg.Tokens, cfg.SigningKey, cfg.TempDir = tokens, []byte(limitsSigningKey), t.TempDir()
	hs := httptest.NewServer(api.New(store, blobs, &cfg).Handler())
	t.Cleanup(hs.Close)
	return &testBundle{store: store, blobDir: blobDir, url: hs.URL}
}

// claimFirst makes a run and claims its first step; it returns the run, the claim
// and the lease credential a function would get.
func (tb *testBundle) claimFirst(t *testing.T) (uuid.UUID, catalog.Claimed, string) {
	t.Helper()
	tb.makeRun(t)
	claimed, err := tb.store.StepClaim(context.Background(), "test", 1, time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	c := claimed[0]
	return c.RunID, c, functions.LeaseCredential([]byte(limitsSigningKey), c.RunID.String(), c.Key, c.LeaseToken)
}

func (tb *testBundle) putCheckpoint(t *testing.T, id uuid.UUID, key, cred, contentType string, body io.Reader) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, tb.url+"/v1/runs/"+id.String()+"/steps/"+key+"/checkpoint", body)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+cred)
	req.Header.Set("Content-Type", contentType)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// TestCheckpointRefusedWritesNothing: a checkpoint from a lease that is no
// longer current is refused before its body is read, so the blob store is unchanged;
// one from the current lease is stored.
func TestCheckpointRefusedWritesNothing(t *testing.T) {
	t.Parallel()
	tb := setupWith(t, api.Config{InlineLimit: 1024})
	id, c, cred := tb.claimFirst(t)
	big := bytes.Repeat([]byte("x"), 1<<20)

	// The step finishes: its credential is stale from now on.
	require.NoError(t, tb.store.StepFinish(context.Background(), &catalog.StepFinishParams{
		RunID: id, Key: c.Key, LeaseToken: c.LeaseToken, Outcome: catalog.OutcomeSucceeded, Output: json.RawMessage(`1`)}))
	before := tb.blobFiles(t)
	status, body := tb.putCheckpoint(t, id, c.Key, cred, "application/octet-stream", bytes.NewReader(big))
	require.Equal(t, http.StatusConflict, status, body)
	require.Contains(t, body, "not stored")
	require.Equal(t, before, tb.blobFiles(t), "a refused checkpoint left files in the blob store")

	// A current lease stores the same body as a blob.
	id2, c2, cred2 := tb.claimFirst(t)
	status, body = tb.putCheckpoint(t, id2, c2.Key, cred2, "application/octet-stream", bytes.NewReader(big))
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `"$blob"`)
	require.Greater(t, len(tb.blobFiles(t)), len(before))
}

// TestCheckpointSizeLimit: a body over MaxCheckpointSize is a 413, refused
// unread when its Content-Length says so, and nothing is stored either way.
func TestCheckpointSizeLimit(t *testing.T) {
	t.Parallel()
	const limit = 64 << 10
	tb := setupWith(t, api.Config{InlineLimit: 1024, MaxCheckpointSize: limit})
	id, c, cred := tb.claimFirst(t)

	// Declared too large: the answer comes without a byte of the body sent.
	u, err := url.Parse(tb.url)
	require.NoError(t, err)
	conn, err := net.Dial("tcp", u.Host)
	require.NoError(t, err)
	defer conn.Close()
	fmt.Fprintf(conn, "PUT /v1/runs/%s/steps/%s/checkpoint HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n", id, c.Key, cred, int64(1)<<30)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)

	// Streamed (no Content-Length) past the limit: cut at the limit.
	status, body := tb.putCheckpoint(t, id, c.Key, cred, "application/octet-stream", io.MultiReader(strings.NewReader(strings.Repeat("y", limit+1))))
	require.Equal(t, http.StatusRequestEntityTooLarge, status, body)
	require.Empty(t, tb.blobFiles(t))

	// At the limit: stored.
	status, body = tb.putCheckpoint(t, id, c.Key, cred, "application/octet-stream", strings.NewReader(strings.Repeat("y", limit)))
	require.Equal(t, http.StatusOK, status, body)
	require.NotEmpty(t, tb.blobFiles(t))
}

// trickle sends head, then body one byte every interval, until the server closes
// the connection or max has passed. It returns how long the connection lasted, the
// status of the server's answer (0 if none) and whether the server closed it.
func trickle(t *testing.T, addr, head string, body []byte, interval, max time.Duration) (lasted time.Duration, status int, closed bool) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	start := time.Now()
	_, err = io.WriteString(conn, head)
	require.NoError(t, err)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for i := 0; i < len(body); i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := conn.Write(body[i : i+1]); err != nil {
					return
				}
			}
		}
	}()
	require.NoError(t, conn.SetReadDeadline(start.Add(max)))
	br := bufio.NewReader(conn)
	if resp, err := http.ReadResponse(br, nil); err == nil {
		status = resp.StatusCode
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	// Reading on until the server closes the connection (or the deadline).
	_, err = io.Copy(io.Discard, br)
	var ne net.Error
	closed = !(errors.As(err, &ne) && ne.Timeout())
	return time.Since(start), status, closed
}

// TestTrickledBodyIsCut: a streamed upload arriving at 20 bytes/s, under the
// minimum rate, is cut after about one window; the unread body of a refused request
// does not hold its connection either.
func TestTrickledBodyIsCut(t *testing.T) {
	t.Parallel()
	const window = 500 * time.Millisecond
	tb := setupWith(t, api.Config{BodyReadTimeout: window, MinBodyRate: 1000})
	id, c, cred := tb.claimFirst(t)
	u, err := url.Parse(tb.url)
	require.NoError(t, err)

	// A valid archive, so that the upload is not refused for its content first.
	bundleBody := archive(t, entry{name: "cairn.yaml", body: manifest}, entry{name: "big", size: 64 << 20})
	head := func(method, path, auth, contentType string, length int) string {
		return fmt.Sprintf("%s %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n", method, path, auth, contentType, length)
	}
	tests := []struct {
		name string
		head string
		body []byte
	}{
		{"bundle upload", head("POST", "/v1/bundles", operatorToken, "application/gzip", len(bundleBody)), bundleBody},
		{"checkpoint", head("PUT", "/v1/runs/"+id.String()+"/steps/"+c.Key+"/checkpoint", cred, "application/octet-stream", 100000), bytes.Repeat([]byte("c"), 100000)},
		{"refused, body unread", head("POST", "/v1/bundles", "not-a-token", "application/gzip", len(bundleBody)), bundleBody},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			lasted, status, closed := trickle(t, u.Host, tt.head, tt.body, 50*time.Millisecond, 20*window)
			require.True(t, closed, "the connection was still open after %s", lasted)
			require.Less(t, lasted, 10*window)
			t.Logf("cut after %s (status %d)", lasted.Round(time.Millisecond), status)
		})
	}
}

// TestSlowButSteadyBodyPasses: the guard counts the rate, not the duration: a body
// that takes several windows but keeps above the rate is read whole.
func TestSlowButSteadyBodyPasses(t *testing.T) {
	t.Parallel()
	// A window long enough that a busy CI machine pausing the client or the
	// server for a few hundred milliseconds (a 200 ms window was cut once) does
	// not make a steady body look slow.
	const window = 500 * time.Millisecond
	tb := setupWith(t, api.Config{BodyReadTimeout: window, MinBodyRate: 1000, InlineLimit: 1024})
	id, c, cred := tb.claimFirst(t)
	pr, pw := io.Pipe()
	go func() {
		chunk := bytes.Repeat([]byte("z"), 500) // 10 KB/s, ten times the minimum
		for range 60 {
			if _, err := pw.Write(chunk); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond) // pacing the client, not waiting for anything
		}
		pw.Close()
	}()
	start := time.Now()
	status, body := tb.putCheckpoint(t, id, c.Key, cred, "application/octet-stream", pr)
	require.Equal(t, http.StatusOK, status, body)
	require.Greater(t, time.Since(start), 5*window)
}

// openStream opens the event stream of run id; the caller closes the response.
func (tb *testBundle) openStream(t testingT, id uuid.UUID) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, tb.url+"/v1/runs/"+id.String()+"/events/stream", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+operatorToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	return resp
}

// TestStreamCap: past MaxStreams open event streams, a new one is a 503
// with Retry-After; once one closes, there is room again.
func TestStreamCap(t *testing.T) {
	t.Parallel()
	tb := setupWith(t, api.Config{MaxStreams: 2})
	id := tb.makeRun(t) // pending: its stream stays open

	first := tb.openStream(t, id)
	defer first.Body.Close()
	second := tb.openStream(t, id)
	defer second.Body.Close()
	require.Equal(t, http.StatusOK, first.StatusCode)
	require.Equal(t, http.StatusOK, second.StatusCode)

	third := tb.openStream(t, id)
	body, _ := io.ReadAll(third.Body)
	third.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, third.StatusCode, string(body))
	require.NotEmpty(t, third.Header.Get("Retry-After"))
	require.Equal(t, "application/problem+json", third.Header.Get("Content-Type"))
	require.Contains(t, string(body), "maximum of 2 open event streams")

	first.Body.Close()
	// Waiting for the server to notice the closed stream and give its slot back.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		resp := tb.openStream(c, id)
		defer resp.Body.Close()
		assert.Equal(c, http.StatusOK, resp.StatusCode)
	}, 10*time.Second, 50*time.Millisecond)
}

// TestMetricsToken: with a metrics token, /metrics needs it (or an admin
// token); without one, /metrics stays open.
func TestMetricsToken(t *testing.T) {
	t.Parallel()
	get := func(t *testing.T, base, token string) int {
		req, err := http.NewRequest(http.MethodGet, base+"/metrics", nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	guarded := setupWith(t, api.Config{Registry: prometheus.NewRegistry(), MetricsToken: metricsToken})
	tests := []struct {
		name  string
		token string
		want  int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"wrong token", metricsToken + "x", http.StatusUnauthorized},
		{"operator token", operatorToken, http.StatusUnauthorized},
		{"metrics token", metricsToken, http.StatusOK},
		{"admin token", adminToken, http.StatusOK},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, get(t, guarded.url, tt.token), tt.name)
	}
	open := setupWith(t, api.Config{Registry: prometheus.NewRegistry()})
	require.Equal(t, http.StatusOK, get(t, open.url, ""))
}

// TestUploadStepLimit: deploying more steps than the limit is a 400 naming
// the count and the limit; the default limit is bundle.DefaultMaxSteps.
func TestUploadStepLimit(t *testing.T) {
	t.Parallel()
	manifestOf := func(n int) string {
		var b strings.Builder
		b.WriteString("name: many\nsteps:\n")
		for i := range n {
			fmt.Fprintf(&b, "  - {key: s%d, builtin: noop}\n", i)
		}
		return b.String()
	}
	tests := []struct {
		name    string
		limits  bundle.Limits
		steps   int
		want    int
		message string
	}{
		{"over a configured limit", bundle.Limits{MaxSteps: 3}, 4, http.StatusBadRequest, "4 steps, over the limit of 3 steps per workflow"},
		{"at a configured limit", bundle.Limits{MaxSteps: 3}, 3, http.StatusCreated, ""},
		{"over the default", bundle.Limits{}, bundle.DefaultMaxSteps + 1, http.StatusBadRequest,
			fmt.Sprintf("%d steps, over the limit of %d steps per workflow", bundle.DefaultMaxSteps+1, bundle.DefaultMaxSteps)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb := setupWith(t, api.Config{BundleLimits: tt.limits})
			status, out := tb.upload(t, bytes.NewReader(archive(t, entry{name: "cairn.yaml", body: manifestOf(tt.steps)})))
			require.Equal(t, tt.want, status, "%v", out)
			if tt.message != "" {
				require.Contains(t, out["detail"], tt.message)
				require.Empty(t, tb.blobFiles(t))
			}
		})
	}
}

// TestConnectionCap: past the cap, a new connection is answered 503 with
// Retry-After instead of waiting; once connections close there is room again.
func TestConnectionCap(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var inFlight sync.WaitGroup
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			inFlight.Done()
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	}))
	hs.Listener = api.LimitConnections(hs.Listener, 2, &api.ConnLimitConfig{Server: hs.Config})
	hs.Start()
	t.Cleanup(hs.Close)

	// Two requests hold both connections.
	inFlight.Add(2)
	blocked := make(chan error, 2)
	for range 2 {
		go func() {
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tr}).Get(hs.URL + "/block")
			if err == nil {
				resp.Body.Close()
			}
			blocked <- err
		}()
	}
	inFlight.Wait()

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get(hs.URL + "/")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Equal(t, "2", resp.Header.Get("Retry-After"))
	require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	require.Contains(t, string(body), "maximum number of open connections")

	close(release)
	require.NoError(t, <-blocked)
	require.NoError(t, <-blocked)
	// Waiting for the server to close the two connections (keep-alives are off at
	// the cap) and give their slots back.
	require.Eventually(t, func() bool {
		resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Get(hs.URL + "/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 10*time.Second, 50*time.Millisecond)
}

// TestIdleConnectionsYieldAtTheCap: a client holding idle keep-alive
// connections up to the cap does not keep others out: near the cap, idle connections
// are closed and a new client is served.
func TestIdleConnectionsYieldAtTheCap(t *testing.T) {
	t.Parallel()
	const limit = 10
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	hs.Listener = api.LimitConnections(hs.Listener, limit, &api.ConnLimitConfig{Server: hs.Config})
	hs.Start()
	t.Cleanup(hs.Close)
	addr := hs.Listener.Addr().String()

	// One request each on limit connections, then silence: idle keep-alives.
	var idle []net.Conn
	for range limit {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer c.Close()
		_, err = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			continue // closed under pressure before answering: fine
		}
		resp.Body.Close()
		idle = append(idle, c)
	}
	// Another client gets served (without the relief: 503, all slots held).
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Get(hs.URL + "/")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	// Because the server closed the idle connections it held when it came near the
	// cap (those after that were served under keep-alives again).
	// Closed means EOF or a reset; a read that times out found it still open.
	closed := 0
	for _, c := range idle {
		require.NoError(t, c.SetReadDeadline(time.Now().Add(time.Second)))
		_, err := c.Read(make([]byte, 1))
		var ne net.Error
		if err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
			closed++
		}
	}
	// The relief closes idle connections until fewer than 75% of the cap are open:
	// how many more it closes depends on when each one next goes idle.
	require.GreaterOrEqual(t, closed, limit-limit*3/4, "idle connections closed by the server")
}
