package functions

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const testSigningKey = "test-signing-key-0123456789abcdef"

// httpTestBundle is an invoker and a server whose handler the test sets.
type httpTestBundle struct {
	invoker *HTTP
	server  *httptest.Server
}

func setupHTTP(t *testing.T, handler http.HandlerFunc) *httpTestBundle {
	t.Helper()
	server := httptest.NewServer(handler)
	t.Cleanup(server.Close)
	return &httpTestBundle{
		invoker: NewHTTP(&HTTPConfig{SigningKey: []byte(testSigningKey), UserAgent: "cairn-test", AllowLocal: true}),
		server:  server,
	}
}

func (b *httpTestBundle) invocation(path string, headers map[string]string) *Invocation {
	return &Invocation{
		Envelope: Envelope{
			RunID:      "run-123",
			Workflow:   "doc-pipeline",
			Version:    3,
			Step:       "summarize",
			Attempt:    2,
			Input:      json.RawMessage(`{"url":"https://example.com"}`),
			LeaseToken: "lease-secret",
		},
		Spec: Spec{HTTP: &HTTPSpec{URL: b.server.URL + path, Headers: headers}},
	}
}

func TestHTTPSuccess(t *testing.T) {
	t.Parallel()

	const outputSize = 8 << 20
	type seen struct {
		header http.Header
		body   []byte
		sigErr error
	}
	requests := make(chan seen, 1)
	b := setupHTTP(t, func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		requests <- seen{
			header: r.Header.Clone(),
			body:   body,
			sigErr: VerifySignature(testSigningKey, r.Header.Get(HeaderSignature), body, time.Minute),
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		chunk := []byte(strings.Repeat("z", 64<<10))
		for written := 0; written < outputSize; written += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})

	inv := b.invocation("/summarize?key=secret", map[string]string{
		"Authorization": "Bearer fn-token",
		HeaderRunID:     "forged",
		"Content-Type":  "text/plain",
	})
	inv.Envelope.Traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sink := &testSink{hashOutput: true}
	require.NoError(t, b.invoker.Invoke(ctx, inv, sink))

	got := <-requests
	require.NoError(t, got.sigErr)
	want, err := json.Marshal(inv.Envelope)
	require.NoError(t, err)
	require.JSONEq(t, string(want), string(got.body))
	require.Contains(t, string(got.body), `"lease_token":"lease-secret"`)

	h := got.header
	require.Equal(t, "application/json", h.Get("Content-Type"))
	require.Equal(t, "run-123", h.Get(HeaderRunID))
	require.Equal(t, "summarize", h.Get(HeaderStep))
	require.Equal(t, "2", h.Get(HeaderAttempt))
	require.Equal(t, inv.Envelope.Traceparent, h.Get("Traceparent"))
	require.Contains(t, string(got.body), `"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"`)
	require.Equal(t, "run-123/summarize", h.Get(HeaderIdempotencyKey))
	require.Equal(t, "Bearer fn-token", h.Get("Authorization"))
	require.Equal(t, "cairn-test", h.Get("User-Agent"))
	ms, err := strconv.ParseInt(h.Get(HeaderTimeoutMs), 10, 64)
	require.NoError(t, err)
	require.Positive(t, ms)
	require.LessOrEqual(t, ms, time.Minute.Milliseconds())

	require.EqualValues(t, outputSize, sink.OutSize())
	require.LessOrEqual(t, sink.MaxWrite(), copyBufferSize)
	require.Equal(t, "application/octet-stream", sink.ContentType())
}

func TestHTTPStatuses(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name           string
		status         int
		retryAfter     string
		body           string
		wantRetryable  bool
		wantRetryAfter time.Duration // exact, or a lower bound when wantAtLeast
		wantAtLeast    bool
		wantMsg        string
	}{
		{name: "500", status: 500, body: "database down", wantRetryable: true, wantMsg: "500 Internal Server Error: database down"},
		{name: "503 retry after seconds", status: 503, retryAfter: "7", wantRetryable: true, wantRetryAfter: 7 * time.Second},
		{name: "429 retry after date", status: 429, retryAfter: time.Now().Add(time.Hour).UTC().Format(http.TimeFormat),
			wantRetryable: true, wantRetryAfter: 58 * time.Minute, wantAtLeast: true},
		{name: "429 retry after date in the past", status: 429, retryAfter: "Mon, 02 Jan 2006 15:04:05 GMT", wantRetryable: true},
		{name: "429 retry after garbage", status: 429, retryAfter: "soon", wantRetryable: true},
		{name: "408", status: 408, wantRetryable: true},
		{name: "400", status: 400, body: `{"error":"missing url"}`, wantMsg: `400 Bad Request: {"error":"missing url"}`},
		{name: "404 ignores retry after", status: 404, retryAfter: "5"},
		{name: "409", status: 409},
		{name: "302 not followed", status: 302, wantMsg: "redirects are not followed"},
		{name: "long body cut", status: 500, body: strings.Repeat("e", 5000) + "TAIL", wantRetryable: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			b := setupHTTP(t, func(w http.ResponseWriter, r *http.Request) {
				if tt.retryAfter != "" {
					w.Header().Set("Retry-After", tt.retryAfter)
				}
				if tt.status == 302 {
					w.Header().Set("Location", "/elsewhere")
				}
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, tt.body)
			})
			sink := &testSink{}
			err := b.invoker.Invoke(context.Background(), b.invocation("/fn?token=secret", nil), sink)

			var fnErr *Error
			require.ErrorAs(t, err, &fnErr)
			require.Equal(t, CodeHTTPStatus, fnErr.Code)
			require.Equal(t, tt.wantRetryable, fnErr.Retryable)
			if tt.wantAtLeast {
				require.GreaterOrEqual(t, fnErr.RetryAfter, tt.wantRetryAfter)
			} else {
				require.Equal(t, tt.wantRetryAfter, fnErr.RetryAfter)
			}
			require.Contains(t, fnErr.Message, strconv.Itoa(tt.status))
			require.Contains(t, fnErr.Message, "/fn")
			require.NotContains(t, fnErr.Message, "secret")
			require.NotContains(t, fnErr.Message, "TAIL")
			require.LessOrEqual(t, len(fnErr.Message), errorSnippetSize+200)
			if tt.wantMsg != "" {
				require.Contains(t, fnErr.Message, tt.wantMsg)
			}
			require.Zero(t, sink.OutSize())
		})
	}
}

func TestHTTPNetworkError(t *testing.T) {
	t.Parallel()

	// A port nobody listens on: bind one, then let it go.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	invoker := NewHTTP(&HTTPConfig{SigningKey: []byte(testSigningKey), AllowLocal: true})
	inv := &Invocation{Spec: Spec{HTTP: &HTTPSpec{URL: "http://" + addr + "/fn"}}}
	err = invoker.Invoke(context.Background(), inv, &testSink{})
	var fnErr *Error
	require.ErrorAs(t, err, &fnErr)
	require.True(t, fnErr.Retryable)
	require.Equal(t, CodeNetwork, fnErr.Code)
	require.Contains(t, fnErr.Message, "connection refused")
}

func TestHTTPBrokenResponse(t *testing.T) {
	t.Parallel()

	b := setupHTTP(t, func(w http.ResponseWriter, r *http.Request) {
		// Promise more than is sent, then drop the connection.
		w.Header().Set("Content-Length", "1000")
		_, _ = io.WriteString(w, "partial")
		w.(http.Flusher).Flush()
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	})
	err := b.invoker.Invoke(context.Background(), b.invocation("/fn", nil), &testSink{})
	var fnErr *Error
	require.ErrorAs(t, err, &fnErr)
	require.True(t, fnErr.Retryable)
	require.Equal(t, CodeNetwork, fnErr.Code)
	require.Contains(t, fnErr.Message, "read response")
}

func TestHTTPContextEnds(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		// afterBody: the handler has sent the headers and part of the body.
		afterBody bool
	}{
		{name: "while waiting for the response"},
		{name: "while streaming the body", afterBody: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			entered := make(chan struct{})
			release := make(chan struct{})
			b := setupHTTP(t, func(w http.ResponseWriter, r *http.Request) {
				// Reading the body lets the server notice the client leaving.
				_, _ = io.Copy(io.Discard, r.Body)
				if tt.afterBody {
					_, _ = io.WriteString(w, "partial")
					w.(http.Flusher).Flush()
				}
				close(entered)
				select {
				case <-r.Context().Done():
				case <-release:
				}
			})
			// Cleanups run last-in first-out: the handler is released before
			// the server's Close waits for it.
			t.Cleanup(func() { close(release) })
			cause := errors.New("run canceled by user")
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			sink := &testSink{}
			done := invokeAsync(ctx, b.invoker, b.invocation("/fn", nil), sink)
			<-entered
			if tt.afterBody {
				// Waiting for the partial body to reach the sink.
				require.Eventually(t, func() bool { return sink.Out() == "partial" }, 5*time.Second, 5*time.Millisecond)
			}
			cancel(cause)
			require.ErrorIs(t, waitResult(t, done), cause)
		})
	}
}

func TestHTTPInvalidSpec(t *testing.T) {
	t.Parallel()

	invoker := NewHTTP(&HTTPConfig{SigningKey: []byte(testSigningKey), AllowLocal: true})
	tests := []struct {
		name string
		spec *HTTPSpec
	}{
		{name: "no spec"},
		{name: "relative url", spec: &HTTPSpec{URL: "/fn"}},
		{name: "ftp", spec: &HTTPSpec{URL: "ftp://example.com/fn"}},
		{name: "unparsable", spec: &HTTPSpec{URL: "http://[::1"}},
		{name: "bad header", spec: &HTTPSpec{URL: "http://127.0.0.1:1/fn", Headers: map[string]string{"X-Bad": "a\nb"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			err := invoker.Invoke(context.Background(), &Invocation{Spec: Spec{HTTP: tt.spec}}, &testSink{})
			var fnErr *Error
			require.ErrorAs(t, err, &fnErr)
			require.False(t, fnErr.Retryable)
			require.Equal(t, CodeInvalidSpec, fnErr.Code)
		})
	}
}

func TestNewHTTPNeedsSigningKey(t *testing.T) {
	t.Parallel()

	require.Panics(t, func() { NewHTTP(nil) })
	require.Panics(t, func() { NewHTTP(&HTTPConfig{}) })
}

func TestVerifySignature(t *testing.T) {
	t.Parallel()

	key := []byte("k1")
	body := []byte(`{"run_id":"r"}`)
	now := time.Unix(1_700_000_000, 0)
	valid := signatureHeader(key, now, body)
	other := signatureHeader([]byte("k0"), now, body)

	tests := []struct {
		name    string
		key     string
		header  string
		body    []byte
		skew    time.Duration
		now     time.Time
		wantErr string
	}{
		{name: "valid", key: "k1", header: valid, body: body, now: now},
		{name: "valid with spaces and unknown entries", key: "k1", header: " v0=zz , " + strings.ReplaceAll(valid, ",", " , "), body: body, now: now},
		{name: "rotated keys: second v1 matches", key: "k1", header: other + ",v1=" + strings.SplitN(valid, "v1=", 2)[1], body: body, now: now},
		{name: "within skew", key: "k1", header: valid, body: body, now: now.Add(4 * time.Minute)},
		{name: "clock behind within skew", key: "k1", header: valid, body: body, now: now.Add(-4 * time.Minute)},
		{name: "too old", key: "k1", header: valid, body: body, now: now.Add(6 * time.Minute), wantErr: "outside tolerance"},
		{name: "custom skew", key: "k1", header: valid, body: body, now: now.Add(2 * time.Second), skew: time.Second, wantErr: "outside tolerance"},
		{name: "wrong key", key: "k2", header: valid, body: body, now: now, wantErr: "no matching"},
		{name: "tampered body", key: "k1", header: valid, body: []byte(`{"run_id":"x"}`), now: now, wantErr: "no matching"},
		{name: "empty header", key: "k1", header: "", body: body, now: now, wantErr: "needs t= and v1="},
		{name: "no v1", key: "k1", header: "t=1700000000", body: body, now: now, wantErr: "needs t= and v1="},
		{name: "bad timestamp", key: "k1", header: strings.Replace(valid, "t=", "t=+", 1), body: body, now: now, wantErr: "bad timestamp"},
		{name: "two timestamps", key: "k1", header: "t=1," + valid, body: body, now: now, wantErr: "two timestamps"},
		{name: "not hex", key: "k1", header: "t=1700000000,v1=zz", body: body, now: now, wantErr: "no matching"},
		{name: "empty key", key: "", header: valid, body: body, now: now, wantErr: "empty key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			err := verifySignatureAt([]byte(tt.key), tt.header, tt.body, tt.skew, tt.now)
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalidSignature)
			require.ErrorContains(t, err, tt.wantErr)
		})
	}

	// The exported form uses the local clock.
	require.NoError(t, VerifySignature("k1", signatureHeader(key, time.Now(), body), body, 0))
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()

	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name  string
		value string
		want  time.Duration
	}{
		{name: "absent", value: "", want: 0},
		{name: "seconds", value: "120", want: 2 * time.Minute},
		{name: "zero", value: "0", want: 0},
		{name: "negative", value: "-5", want: 0},
		{name: "huge", value: "99999999999999", want: 365 * 24 * time.Hour},
		{name: "date", value: now.Add(90 * time.Second).Format(http.TimeFormat), want: 90 * time.Second},
		{name: "past date", value: now.Add(-time.Hour).Format(http.TimeFormat), want: 0},
		{name: "garbage", value: "tomorrow", want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			require.Equal(t, tt.want, parseRetryAfter(tt.value, now))
		})
	}
}

func FuzzVerifySignature(f *testing.F) {
	key := []byte("fuzz-key")
	body := []byte(`{"a":1}`)
	now := time.Unix(1_700_000_000, 0)
	f.Add(signatureHeader(key, now, body), body)
	f.Add("t=1700000000,v1=00", body)
	f.Add("t=,v1=", []byte{})
	f.Add(",,,=,t=1,t=2", []byte("x"))
	f.Fuzz(func(t *testing.T, header string, b []byte) {
		err := verifySignatureAt(key, header, b, time.Minute, now)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidSignature)
			return
		}
		// Accepted: it must carry a real signature of this body.
		require.Contains(t, header, "v1=")
	})
}

// TestHTTPRefusesLocalAddresses: by default a step cannot reach the
// server's own machine (its API, /metrics) or a cloud's instance credentials, by
// address or by a name that resolves to one; the failure is terminal and no
// request is sent.
func TestHTTPRefusesLocalAddresses(t *testing.T) {
	t.Parallel()
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits++ }))
	defer srv.Close()
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)
	invoker := NewHTTP(&HTTPConfig{SigningKey: []byte(testSigningKey)})
	for _, u := range []string{srv.URL, "http://localhost:" + port + "/", "http://[::1]:" + port + "/",
		"http://169.254.169.254/latest/meta-data/", "http://0.0.0.0:" + port + "/"} {
		inv := &Invocation{Envelope: Envelope{RunID: "r", Step: "s", Attempt: 1}, Spec: Spec{HTTP: &HTTPSpec{URL: u}}}
		err := invoker.Invoke(context.Background(), inv, &testSink{})
		var fe *Error
		require.ErrorAs(t, err, &fe, u)
		require.Equal(t, CodeInvalidSpec, fe.Code, "%s: %v", u, err)
		require.False(t, fe.Retryable)
		require.Contains(t, fe.Message, "CAIRN_HTTP_ALLOW_LOCAL")
	}
	require.Zero(t, hits, "a request reached the local server")
}
