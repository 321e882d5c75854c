package api_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// answer is a response to a raw request: status, body and the problem it holds.
type answer struct {
	status  int
	header  http.Header
	body    []byte
	problem struct {
		Code   string `json:"code"`
		Detail string `json:"detail"`
		Errors []struct {
			Location string `json:"location"`
			Message  string `json:"message"`
			Value    any    `json:"value"`
		} `json:"errors"`
	}
}

// locations lists the locations the problem names.
func (a *answer) locations() []string {
	var out []string
	for _, e := range a.problem.Errors {
		out = append(out, e.Location)
	}
	return out
}

// send makes a raw request as the operator: rawURL is sent as written (escapes and
// all), headers as given, byte for byte.
func (tb *testBundle) send(t *testing.T, method, rawURL string, header map[string]string, body []byte) *answer {
	t.Helper()
	return tb.sendAs(t, operatorToken, method, rawURL, header, body)
}

// sendAs is send with another bearer token.
func (tb *testBundle) sendAs(t *testing.T, token, method, rawURL string, header map[string]string, body []byte) *answer {
	t.Helper()
	return tb.sendWithin(t, 30*time.Second, token, method, rawURL, header, body)
}

// sendWithin is sendAs with a bound on the whole exchange: an answer whose body
// has not ended by then (an event stream) has status -1.
func (tb *testBundle) sendWithin(t *testing.T, within time.Duration, token, method, rawURL string, header map[string]string, body []byte) *answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, tb.url+rawURL, r)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header[http.CanonicalHeaderKey(k)] = []string{v}
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	a := &answer{status: resp.StatusCode, header: resp.Header}
	a.body, err = io.ReadAll(resp.Body)
	if ctx.Err() != nil {
		a.status = -1
		return a
	}
	require.NoError(t, err)
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
		require.NoError(t, json.Unmarshal(a.body, &a.problem), "%s", a.body)
	}
	return a
}

// deployHello uploads a one-step workflow "hello" and returns a run of it that has
// a step with an attempt (claimed, still running).
func (tb *testBundle) deployHello(t *testing.T) (runID, step string) {
	t.Helper()
	status, out := tb.upload(t, bytes.NewReader(archive(t, entry{name: "cairn.yaml", body: "name: hello\nsteps:\n  - {key: greet, builtin: noop}\n"})))
	require.Equal(t, http.StatusCreated, status, "%v", out)
	a := tb.send(t, http.MethodPost, "/v1/workflows/hello/runs", nil, []byte(`{"input":{"who":"world"}}`))
	require.Equal(t, http.StatusAccepted, a.status, "%s", a.body)
	var run struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.Unmarshal(a.body, &run))
	claimed, err := tb.store.StepClaim(context.Background(), "test", 10, time.Hour)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	return run.ID, claimed[0].Key
}

// legacyCursor mints a cursor as a client could before cursors were signed: the
// checksum was the first
// 16 hex digits of sha256("1\0<list>\0<filter>\0<after>"), computable by anyone.
func legacyCursor(list, filter, after string) string {
	sum := sha256.Sum256([]byte("1\x00" + list + "\x00" + filter + "\x00" + after))
	doc := map[string]any{"v": 1, "l": list, "a": json.RawMessage(after), "s": hex.EncodeToString(sum[:8])}
	if filter != "" {
		doc["f"] = filter
	}
	b, _ := json.Marshal(doc)
	return base64.RawURLEncoding.EncodeToString(b)
}

// TestBadInputAnswers4xx replays input PostgreSQL cannot store (docs/security.md,
// "Bad input"): text
// PostgreSQL refuses (NUL, invalid UTF-8, lone surrogates) and integers beyond its
// integer columns, in bodies, headers, paths, queries and cursors, are answered with
// a 4xx naming the field, never a 500.
func TestBadInputAnswers4xx(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	runID, step := tb.deployHello(t)
	tests := []struct {
		name     string
		method   string
		url      string
		header   map[string]string
		body     string
		status   int    // 0: any 4xx
		location string // named in the problem's errors, when not empty
	}{
		{name: "input with NUL", method: "POST", url: "/v1/workflows/hello/runs", body: `{"input":{"a":"\u0000"}}`, status: 422, location: "body.input.a"},
		{name: "input key with NUL", method: "POST", url: "/v1/workflows/hello/runs", body: `{"input":{"x":[1,{"a\u0000":1}]}}`, status: 422, location: "body.input.x[1]"},
		{name: "input with invalid UTF-8", method: "POST", url: "/v1/workflows/hello/runs", body: "{\"input\":\"\xff\"}", status: 422, location: "body.input"},
		{name: "input with invalid UTF-8 pair", method: "POST", url: "/v1/workflows/hello/runs", body: "{\"input\":[\"\xff\xfe\"]}", status: 422, location: "body.input[0]"},
		{name: "input with lone high surrogate", method: "POST", url: "/v1/workflows/hello/runs", body: `{"input":"\ud800"}`, status: 422, location: "body.input"},
		{name: "input with lone low surrogate", method: "POST", url: "/v1/workflows/hello/runs", body: `{"input":{"k":"x\udc00y"}}`, status: 422, location: "body.input.k"},
		{name: "input with reversed pair", method: "POST", url: "/v1/workflows/hello/runs", body: `{"input":"\udc00\ud800"}`, status: 422, location: "body.input"},
		{name: "version over int32", method: "POST", url: "/v1/workflows/hello/runs", body: `{"version":99999999999}`, status: 422, location: "body.version"},
		{name: "version max int64", method: "POST", url: "/v1/workflows/hello/runs", body: `{"version":9223372036854775807}`, status: 422, location: "body.version"},
		{name: "idempotency key with 0xFF", method: "POST", url: "/v1/workflows/hello/runs", header: map[string]string{"Idempotency-Key": "a\xffb"}, body: `{}`, status: 422, location: "header.Idempotency-Key"},
		{name: "idempotency key with 0x80", method: "POST", url: "/v1/workflows/hello/runs", header: map[string]string{"Idempotency-Key": "\x80"}, body: `{}`, status: 422, location: "header.Idempotency-Key"},
		{name: "workflow filter NUL", method: "GET", url: "/v1/runs?workflow=%00", status: 422, location: "query.workflow"},
		{name: "workflow filter inner NUL", method: "GET", url: "/v1/runs?workflow=a%00b", status: 422, location: "query.workflow"},
		{name: "workflow filter 0xFF", method: "GET", url: "/v1/runs?workflow=%ff", status: 422, location: "query.workflow"},
		{name: "version path over int32", method: "GET", url: "/v1/workflows/hello/versions/2147483648", status: 422, location: "path.version"},
		{name: "version path max int64", method: "GET", url: "/v1/workflows/hello/versions/9223372036854775807", status: 422, location: "path.version"},
		{name: "attempt over int32", method: "GET", url: "/v1/runs/" + runID + "/steps/" + step + "/logs?attempt=2147483648", status: 422, location: "query.attempt"},
		{name: "attempt max int64", method: "GET", url: "/v1/runs/" + runID + "/steps/" + step + "/logs?attempt=9223372036854775807", status: 422, location: "query.attempt"},
		{name: "cancel reason with NUL", method: "POST", url: "/v1/runs/" + runID + "/cancel", body: `{"reason":"a\u0000b"}`, status: 422, location: "body.reason"},
		{name: "forged workflows cursor with NUL", method: "GET", url: "/v1/workflows?cursor=" + legacyCursor("workflows", "", `"\u0000"`), status: 400},
		{name: "forged versions cursor max int64", method: "GET", url: "/v1/workflows/hello/versions?cursor=" + legacyCursor("versions", "hello", "9223372036854775807"), status: 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var body []byte
			if tt.body != "" {
				body = []byte(tt.body)
			}
			a := tb.send(t, tt.method, tt.url, tt.header, body)
			if tt.status != 0 {
				require.Equal(t, tt.status, a.status, "%s", a.body)
			}
			require.True(t, a.status >= 400 && a.status < 500, "status %d: %s", a.status, a.body)
			if tt.location != "" {
				require.Contains(t, a.locations(), tt.location, "%s", a.body)
			}
		})
	}

	// The run refused a NUL reason and is still running; it cancels with a good one.
	a := tb.send(t, http.MethodPost, "/v1/runs/"+runID+"/cancel", nil, []byte(`{"reason":"enough"}`))
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
}

// TestGoodTextAccepted: what PostgreSQL stores is still accepted: surrogate pairs,
// other control characters, non-BMP characters, a reason with U+FFFD, the largest
// version.
func TestGoodTextAccepted(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	runID, _ := tb.deployHello(t)
	a := tb.send(t, http.MethodPost, "/v1/workflows/hello/runs", map[string]string{"Idempotency-Key": "clé-😀"},
		[]byte(`{"input":{"emoji":"\ud83d\ude00","ctl":"\u0001\u001f","esc":"\\u0000","k\u00e9":"\uffff"}}`))
	require.Equal(t, http.StatusAccepted, a.status, "%s", a.body)
	var run struct {
		Input map[string]string `json:"input"`
	}
	require.NoError(t, json.Unmarshal(a.body, &run))
	require.Equal(t, "😀", run.Input["emoji"])
	require.Equal(t, `\u0000`, run.Input["esc"], "an escaped backslash is not an escape")

	a = tb.send(t, http.MethodGet, "/v1/workflows/hello/versions/2147483647", nil, nil)
	require.Equal(t, http.StatusNotFound, a.status, "%s", a.body)
	a = tb.send(t, http.MethodPost, "/v1/workflows/hello/runs", nil, []byte(`{"version":2147483647}`))
	require.Equal(t, http.StatusNotFound, a.status, "%s", a.body)
	a = tb.send(t, http.MethodPost, "/v1/runs/"+runID+"/cancel", nil, []byte(`{"reason":"\udc00"}`))
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
}

// TestBadBundleStrings: a manifest whose description or "with" values hold a NUL is
// a 400 naming the field, not a 500.
func TestBadBundleStrings(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, manifest, field string }{
		{name: "description", manifest: "name: wf\ndescription: \"a\\x00b\"\nsteps:\n  - {key: a, builtin: noop}\n", field: "description"},
		{name: "with value", manifest: "name: wf\nsteps:\n  - {key: a, builtin: echo, with: {value: \"a\\x00b\"}}\n", field: "steps[0].with.value"},
		{name: "with key", manifest: "name: wf\nsteps:\n  - {key: a, builtin: echo, with: {\"a\\x00\": 1}}\n", field: "steps[0].with"},
		{name: "nested with value", manifest: "name: wf\nsteps:\n  - {key: a, builtin: echo, with: {l: [x, \"\\0\"]}}\n", field: "steps[0].with.l[1]"},
		{name: "binary description", manifest: "name: wf\ndescription: !!binary /w==\nsteps:\n  - {key: a, builtin: noop}\n", field: "description"},
		{name: "http url", manifest: "name: wf\nsteps:\n  - {key: a, http: {url: \"http://x/\\0\"}}\n", field: "steps[0].http.url"},
		{name: "lambda qualifier", manifest: "name: wf\nsteps:\n  - {key: a, lambda: {function: f, qualifier: \"\\0\"}}\n", field: "steps[0].lambda.qualifier"},
		{name: "env value", manifest: "name: wf\nsteps:\n  - {key: a, exec: [\"./a\"], env: {A: \"a\\0\"}}\n", field: "steps[0].env.A"},
		{name: "env on http", manifest: "name: wf\nsteps:\n  - {key: a, http: {url: \"https://x\"}, env: {A: b}}\n", field: "steps[0].env"},
		{name: "env secret name", manifest: "name: wf\nsteps:\n  - {key: a, exec: [\"./a\"], env: {A: {secret: \"No Good\"}}}\n", field: "steps[0].env.A.secret"},
		{name: "header secret name", manifest: "name: wf\nsteps:\n  - {key: a, http: {url: \"https://x\", headers: {Authorization: {secret: UP}}}}\n", field: "steps[0].http.headers[\"Authorization\"].secret"},
		{name: "resources", manifest: "name: wf\nsteps:\n  - {key: a, exec: [\"./a\"], resources: {memory: lots}}\n", field: "steps[0].resources.memory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t)
			status, problem := tb.upload(t, bytes.NewReader(archive(t, entry{name: "cairn.yaml", body: tt.manifest})))
			require.Equal(t, http.StatusBadRequest, status, "%v", problem)
			require.Contains(t, fmt.Sprint(problem["errors"]), "cairn.yaml#"+tt.field, "%v", problem)
		})
	}
}

// TestProblemsEchoShortPrefix: a problem never echoes more than a short prefix
// of a bad value, whatever its size.
func TestProblemsEchoShortPrefix(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	long := strings.Repeat("A", 900_000)
	for _, url := range []string{
		"/v1/runs?cursor=" + long,
		"/v1/runs?status=" + long,
		"/v1/workflows/" + strings.Repeat("Z", 100_000),
		"/v1/runs/" + strings.Repeat("f", 100_000),
	} {
		a := tb.send(t, http.MethodGet, url, nil, nil)
		require.Equal(t, http.StatusUnprocessableEntity, a.status, "%.200s", a.body)
		require.Less(t, len(a.body), 2048, "%.300s", a.body)
		require.NotEmpty(t, a.problem.Errors)
		for _, e := range a.problem.Errors {
			if s, ok := e.Value.(string); ok {
				require.LessOrEqual(t, len(s), 64+len("…"), "%s", a.body)
				require.True(t, strings.HasSuffix(s, "…"), "%s", a.body)
			}
		}
	}
	// A long unknown field name in a body is cut in the location as well.
	a := tb.send(t, http.MethodPost, "/v1/workflows/hello/runs", nil, []byte(`{"`+strings.Repeat("k", 500_000)+`":1}`))
	require.Equal(t, http.StatusUnprocessableEntity, a.status, "%.200s", a.body)
	require.Less(t, len(a.body), 2048, "%.300s", a.body)
}
