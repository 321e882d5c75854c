package api_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/client"
	"github.com/cairnrun/cairn/functions"
	"github.com/cairnrun/cairn/internal/testenv"
)

// TestFuzzEveryOperation drives every operation of the API through the generated
// client (package client) with hostile values chosen by a seeded random generator:
// NUL, invalid UTF-8, lone surrogates, huge, negative and out-of-range integers,
// long strings, forged and mangled cursors, odd headers, broken JSON and bundles.
// Where the client's types cannot carry a value (a run ID that is not a UUID, an
// integer parameter that is not a number, a body that is not the client's JSON), a
// request editor of the client puts it in. The server is real (PostgreSQL from
// internal/testenv); no answer may be a 5xx, no line may be logged at ERROR, and a
// problem document stays small whatever was sent.
//
// CAIRN_FUZZ_REQUESTS sets the number of requests (default 2,000: a few seconds);
// CAIRN_FUZZ_SEED the seed (default: from the clock, logged to repeat a run). A long
// run, as in docs/security.md:
//
//	CAIRN_FUZZ_REQUESTS=100000 go test -race -count=1 -run TestFuzzEveryOperation -timeout 1h ./api/
func TestFuzzEveryOperation(t *testing.T) {
	t.Parallel()
	n := envInt(t, "CAIRN_FUZZ_REQUESTS", 2000)
	seed := uint64(envInt(t, "CAIRN_FUZZ_SEED", int(time.Now().UnixNano()&0x7fffffff)))
	t.Logf("%d requests, CAIRN_FUZZ_SEED=%d", n, seed)

	f := newFuzzTarget(t)
	const workers = 4
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	counts := make([]map[int]int, len(fuzzOps))
	for i := range counts {
		counts[i] = map[int]int{}
	}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := &gen{r: rand.New(rand.NewPCG(seed, uint64(w))), f: f}
			for next.Add(1) <= int64(n) {
				i := g.r.IntN(len(fuzzOps))
				op := fuzzOps[i]
				res := f.call(op, g)
				mu.Lock()
				counts[i][res.status]++
				if why := res.wrong(); why != "" && len(failures) < 20 {
					failures = append(failures, fmt.Sprintf("%s %s: %s\n  sent: %.400q\n  body: %.400q", op.name, why, res.err, res.sent, res.body))
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for i, op := range fuzzOps {
		t.Logf("%-14s %v", op.name, counts[i])
	}
	// A 400 all the same, but an input check is missing where these come from.
	t.Logf("values refused by the database, not by an input check: %d %v", f.refusals.Load(), f.refusedBy)
	require.Empty(t, failures, "CAIRN_FUZZ_SEED=%d\n%s", seed, strings.Join(failures, "\n"))
	require.Zero(t, f.errorLogs.Load(), "lines logged at ERROR: %s", f.lastError.Load())
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, name)
	return n
}

// fuzzTarget is the server under test and the valid values the generator mixes in.
type fuzzTarget struct {
	url       string
	key       []byte // signing key: lease credentials
	workflow  string
	digest    string
	runs      []uuid.UUID
	steps     []string
	leases    map[uuid.UUID]int64 // running attempts of step "a": run → lease token
	cursors   map[string]string   // list → a cursor the server issued
	tokens    []string            // operator (most used), viewer, admin
	errorLogs atomic.Int64
	lastError atomic.Value
	refusals  atomic.Int64 // values the database refused (catalog.ErrInvalidInput)
	mu        sync.Mutex
	refusedBy map[string]int // refusals by the operation of the catalog's error
}

const (
	fuzzViewer   = "fuzz-viewer-token-0123456789"
	fuzzOperator = "fuzz-operator-token-0123456789"
	fuzzAdmin    = "fuzz-admin-token-0123456789"
)

// errorCounter is a slog handler that counts the records at ERROR, and the values
// the database refused (logged at WARN).
type errorCounter struct{ f *fuzzTarget }

func (h errorCounter) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h errorCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Level < slog.LevelError {
		if r.Message == "database refused a value of the request" {
			h.f.refusals.Add(1) // a 400, but an input check is missing
			r.Attrs(func(a slog.Attr) bool {
				if a.Key == "error" {
					// "checkpoint step …: catalog: invalid input: …": counted by operation.
					words := strings.Fields(a.Value.String())
					op := strings.Join(words[:min(2, len(words))], " ")
					h.f.mu.Lock()
					h.f.refusedBy[op]++
					h.f.mu.Unlock()
				}
				return true
			})
		}
		return nil
	}
	h.f.errorLogs.Add(1)
	msg := r.Message
	r.Attrs(func(a slog.Attr) bool { msg += " " + a.String(); return true })
	h.f.lastError.Store(msg)
	return nil
}
func (h errorCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h errorCounter) WithGroup(string) slog.Handler      { return h }

func newFuzzTarget(t *testing.T) *fuzzTarget {
	t.Helper()
	ctx := context.Background()
	f := &fuzzTarget{key: []byte("fuzz-signing-key"), workflow: "hello", steps: []string{"a", "b"},
		leases: map[uuid.UUID]int64{}, cursors: map[string]string{}, refusedBy: map[string]int{}, tokens: []string{fuzzOperator, fuzzViewer, fuzzAdmin}}
	f.lastError.Store("")
	store := catalog.New(testenv.DB(t), nil)
	blobs, err := blobstore.NewFile(t.TempDir(), nil)
	require.NoError(t, err)
	tokens, err := api.ParseTokens("viewer:" + fuzzViewer + ",operator:" + fuzzOperator + ",admin:" + fuzzAdmin)
	require.NoError(t, err)
	srv := api.New(store, blobs, &api.Config{Tokens: tokens, TempDir: t.TempDir(), SigningKey: f.key, Logger: slog.New(errorCounter{f})})
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	f.url = hs.URL

	c, err := client.New(f.url, fuzzOperator)
	require.NoError(t, err)
	for _, m := range []string{"name: hello\nsteps:\n  - {key: a, builtin: noop}\n  - {key: b, builtin: echo, needs: [a]}\n",
		"name: hello\ndescription: second\nsteps:\n  - {key: a, builtin: noop}\n  - {key: b, builtin: echo, needs: [a]}\n",
		"name: other\nsteps:\n  - {key: a, builtin: noop}\n"} {
		res, err := c.UploadBundle(ctx, bytes.NewReader(archive(t, entry{name: "cairn.yaml", body: m})))
		require.NoError(t, err)
		f.digest = res.Digest
	}
	for i := range 6 {
		input := any(map[string]any{"i": i, "text": strings.Repeat("x", i*1500)})
		run, err := c.CreateRun(ctx, "hello", client.StartRunBody{Input: &input}, "")
		require.NoError(t, err)
		f.runs = append(f.runs, uuid.MustParse(run.Id))
	}
	// Every step "a" runs; half finish with an output, so that b runs too.
	claimed, err := store.StepClaim(ctx, "fuzz", 100, time.Hour)
	require.NoError(t, err)
	for i, cl := range claimed {
		if i%2 == 0 {
			f.leases[cl.RunID] = cl.LeaseToken
			continue
		}
		require.NoError(t, store.StepFinish(ctx, &catalog.StepFinishParams{RunID: cl.RunID, Key: cl.Key, LeaseToken: cl.LeaseToken,
			Outcome: catalog.OutcomeSucceeded, Output: json.RawMessage(`{"ok":true}`)}))
	}
	_, err = store.StepClaim(ctx, "fuzz", 100, time.Hour)
	require.NoError(t, err)

	// A cursor of each list, as the server issued it.
	limit := int64(1)
	raw, err := client.NewClient(f.url, client.WithRequestEditorFn(bearer(fuzzOperator)))
	require.NoError(t, err)
	for list, get := range map[string]func() (*http.Response, error){
		"runs": func() (*http.Response, error) { return raw.ListRuns(ctx, &client.ListRunsParams{Limit: &limit}) },
		"workflows": func() (*http.Response, error) {
			return raw.ListWorkflows(ctx, &client.ListWorkflowsParams{Limit: &limit})
		},
		"versions": func() (*http.Response, error) {
			return raw.ListVersions(ctx, "hello", &client.ListVersionsParams{Limit: &limit})
		},
		"events": func() (*http.Response, error) {
			return raw.ListEvents(ctx, f.runs[0], &client.ListEventsParams{Limit: &limit})
		},
	} {
		resp, err := get()
		require.NoError(t, err)
		var page struct {
			NextCursor string `json:"next_cursor"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&page))
		resp.Body.Close()
		require.NotEmpty(t, page.NextCursor, list)
		f.cursors[list] = page.NextCursor
	}
	return f
}

func bearer(token string) client.RequestEditorFn {
	return func(_ context.Context, req *http.Request) error {
		if req.Header.Get("Authorization") == "" && token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		return nil
	}
}

// result is the outcome of one fuzzed request.
type result struct {
	status int
	sent   string // what was sent, for the report
	body   []byte
	err    error
}

// wrong says what is wrong with the answer, or "".
func (r *result) wrong() string {
	switch {
	case r.err != nil && r.status == 0:
		return "no answer"
	case r.status >= 500:
		return fmt.Sprintf("status %d", r.status)
	case r.status >= 400 && len(r.body) > 128<<10:
		return fmt.Sprintf("status %d with a problem of %d bytes", r.status, len(r.body))
	}
	return ""
}

// fuzzOp is one operation of the API: do sends it through the generated client,
// with values from g and editors that put in what the client's types cannot carry.
type fuzzOp struct {
	name string
	do   func(ctx context.Context, c *client.APIClient, g *gen, ed []client.RequestEditorFn) (*http.Response, error)
}

// call sends one request of op and reads (a bounded part of) the answer. Streams
// are cut once their status is known.
func (f *fuzzTarget) call(op fuzzOp, g *gen) result {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var sent strings.Builder
	token := f.tokens[0]
	switch g.r.IntN(20) {
	case 0:
		token = f.tokens[1+g.r.IntN(2)]
	case 1:
		token = g.headerValue()
	}
	c, err := client.NewClient(f.url, client.WithRequestEditorFn(bearer(token)))
	if err != nil {
		return result{err: err}
	}
	record := func(_ context.Context, req *http.Request) error {
		fmt.Fprintf(&sent, "%s %s %v", req.Method, req.URL.RequestURI(), req.Header)
		return nil
	}
	resp, err := op.do(ctx, c, g, []client.RequestEditorFn{record})
	if err != nil {
		if strings.Contains(err.Error(), "invalid header") || strings.Contains(err.Error(), "invalid URL") || strings.Contains(err.Error(), "net/http: invalid") {
			return result{status: -1, sent: sent.String()} // the client would not send it
		}
		return result{err: err, sent: sent.String()}
	}
	defer resp.Body.Close()
	res := result{status: resp.StatusCode, sent: sent.String()}
	if resp.StatusCode >= 400 || !strings.Contains(resp.Header.Get("Content-Type"), "event-stream") {
		res.body, res.err = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	}
	return res
}

// swap replaces the path segment old of a request with new (escaped): how a run ID
// that is not a UUID reaches the server through the client.
func swap(old, new string) client.RequestEditorFn {
	return func(_ context.Context, req *http.Request) error {
		req.URL.Path = strings.Replace(req.URL.Path, old, new, 1)
		req.URL.RawPath = strings.Replace(req.URL.EscapedPath(), url.PathEscape(old), url.PathEscape(new), 1)
		return nil
	}
}

// setQuery sets a query parameter to a raw value the client's type cannot hold.
func setQuery(key, value string) client.RequestEditorFn {
	return func(_ context.Context, req *http.Request) error {
		q := req.URL.Query()
		q.Set(key, value)
		req.URL.RawQuery = q.Encode()
		return nil
	}
}

var fuzzOps = []fuzzOp{
	{"healthz", func(ctx context.Context, c *client.APIClient, g *gen, ed []client.RequestEditorFn) (*http.Response, error) {
		return c.Healthz(ctx, ed...)
	}},
	{"readyz", func(ctx context.Context, c *client.APIClient, g *gen, ed []client.RequestEditorFn) (*http.Response, error) {
		return c.Readyz(ctx, ed...)
	}},
	{"uploadBundle", func(ctx context.Context, c *client.APIClient, g *gen, ed []client.RequestEditorFn) (*http.Response, error) {
		ct := "application/gzip"
		if g.chance(0.1) {
			ct = g.headerValue()
		}
		p := &client.UploadBundleParams{}
		if g.chance(0.3) {
			promote := g.chance(0.5)
			p.Promote = &promote
		}
		if g.chance(0.05) {
			ed = append(ed, setQuery("promote", g.hostile()))
		}
		return c.UploadBundleWithBody(ctx, p, ct, bytes.NewReader(g.bundle()), ed...)
	}},
	{"getBundle", func(ctx context.Context, c *client.APIClient, g *gen, ed []client.RequestEditorFn) (*http.Response, error) {
		return c.GetBundle(ctx, g.str(0.6, g.f.digest), ed...)
	}},
	{"listRuns", func(ctx context.Context, c *client.APIClient, g *gen, ed []client.RequestEditorFn) (*http.Response, error) {
		p := &client.ListRunsParams{Cursor: g.cursor("runs"), Limit: g.limit()}
		if g.chance(0.5) {
			w := g.str(0.3, g.f.workflow)
			p.Workflow = &w
		}
		if g.chance(0.3) {
			st := client.ListRunsParamsStatus(g.str(0.5, "running"))
			p.Status = &st
		}
		return c.ListRuns(ctx, p, append(ed, g.rawLimit()...)...)
	}},
	{"getRun", func(ctx context.Context, c *client.APIClient, g *gen, ed []client.RequestEditorFn) (*http.Response, error) {
		id, swapped := g.runID()
		return c.GetRun(ctx, id, append(ed, swapped...)...)
	}},
	{"cancelRun", func(ctx context.Context, c *client.APIClient, g *gen, ed []client.RequestEditorFn) (*http.Response, error) {
		// Canceling ends the runs the other operations need: the runs with a
		// running attempt are never canceled, the others rarely.
		id, swapped := g.runID()
		if _, leased := g.f.leases[id]; leased || (len(swapped) == 0 && g.chance(0.9)) {
			id = uuid.New()
		}
		body := `{"reason":` + g.jsonString() + `}`
		switch g.r.IntN(6) {
		case 0:
			body = g.jsonValue(3)
		case 1:
			body = g.broken(body)
		case 2:
			body = `{"reason":"` + strings.Repeat("r", 990+g.r.IntN(20)) + `"}`
		}
		return c.CancelRunWithBody(ctx, id, g.contentType(), strings.NewReader(body), append(ed, swapped...)...)
	}},
	{"retryRun", func(ctx context.Context, c *client.APIClient, g *gen, ed []client.RequestEditorFn) (*http.Response, error) {
		id, swapped := g.runID()
		p := &client.RetryRunParams{}
		if g.chance(0.3) {
			k := g.headerValue()
			p.IdempotencyKey = &k
		}
		body := "{}"
		switch g.r.IntN(5) {
		case 0:
			body = `{"version":` + strconv.FormatInt(g.int64(), 10) + `}`
		case 1:
			body = `{"version":` + g.jsonNumber() + `}`
		case 2:
			body = g.broken(`{"version":1}`)
		case 3:
			body = g.jsonValue(2)
		}
		return c.RetryRunWithBody(ctx, id, p, g.contentType(), strings.NewReader(body), append(ed, swapped...)...)
	}},
	{"rerunRun", func(ctx context.Context, c *client.APIClient, g *gen, ed []client.RequestEditorFn) (*http.Response, error) {
		id, swapped := g.runID()
		p := &client.RerunRunParams{}
		if g.chance(0.3) {
			k := g.headerValue()
			p.IdempotencyKey = &k
		}
		fields := []string{`"from_step":` + strconv.Quote(g.str(0.7, g.step()))}
		if g.chance(0.5) {
			fields = append(fields, `"input":`+g.jsonValue(4))
		}
		if g.chance(0.3) {
			fields = append(fields, `"version":`+strconv.FormatInt(g.int64(), 10))
		}
		if g.chance(0.7) {
			fields = append(fields, `"dry_run":true`)
		}
		body := "{" + strings.Join(fields, ",") + "}"
		switch g.r.IntN(8) {
		case 0:
			body = g.broken(body)
		case 1:
			body = g.jsonValue(2)
		}
		return c.RerunRunWithBody(ctx, id, p, g.contentType(), strings.NewReader(body), append(ed, swapped...)...)
	}},
	{"listEvents", func(ctx context.Context, c *client.APIClient, g *gen, ed []client.RequestEditorFn) (*http.Response, error) {
		id, swapped := g.runID()
		return c.ListEvents(ctx, id, &client.ListEventsParams{Cursor: g.cursor("events"), Limit: g.limit()}, append(append(ed, swapped...), g.rawLimit()...)...)
	}},
	{"streamEvents", func(ctx context.Context, c *client.APIClient, g *gen, ed []client.RequestEditorFn) (*http.Response, error) {
		id, swapped := g.runID()
		p := &client.StreamEventsParams{}
		if g.chance(0.5) {
			a := g.int64()
			p.After = &a
		}
		if g.chance(0.5) {
			v := g.headerValue()
			p.LastEventID = &v
		}
		ed = append(ed, swapped...)
		if g.chance(0.2) {
			ed = append(ed, setQuery("after", g.hostile()))
		}
		return c.StreamEvents(ctx, id, p, ed...)
	}},
	{"listSteps", func(ctx context.Context, c *client.APIClient, g *gen, ed []client.RequestEditorFn) (*http.Response, error) {
		id, swapped := g.runID()
		return c.ListSteps(ctx, id, append(ed, swapped...)...)
	}},
	{"listAttempts", func(ctx context.Context, c *client.APIClient, g *gen, ed []client.RequestEditorFn) (*http.Response, error) {
		id, swapped := g.runID()
		return c.ListAttempts(ctx, id, g.str(0.6, g.step()), append(ed, swapped...)...)
	}},
	{"putCheckpoint", func(ctx context.Context, c *client.APIClient, g *gen, ed []client.RequestEditorFn) (*http.Response, error) {
		id, swapped := g.runID()
		key := g.str(0.8, "a")
		var cred string
		if token, ok := g.f.leases[id]; ok && len(swapped) == 0 {
			cred = functions.LeaseCredential(g.f.key, id.String(), key, token)
		}
		switch {
		case g.chance(0.1):
			cred = g.headerValue()
		case g.chance(0.1):
			cred = strconv.FormatInt(g.int64(), 10) + ".deadbeef"
		}
		auth := "Bearer " + cred
		ct := g.contentType()
		body := g.jsonValue(4)
		if g.chance(0.2) {
			body = g.broken(body)
		}
		return c.PutCheckpointWithBody(ctx, id, key, &client.PutCheckpointParams{Authorization: &auth, ContentType: &ct}, ct, strings.NewReader(body), append(ed, swapped...)...)
	}},
	{"getAttemptLog", func(ctx context.Context, c *client.APIClient, g *gen, ed []client.RequestEditorFn) (*http.Response, error) {
		id, swapped := g.runID()
		p := &client.GetAttemptLogParams{}
		if g.chance(0.7) {
			a := g.int64()
			p.Attempt = &a
		}
		ed = append(ed, swapped...)
		if g.chance(0.2) {
			ed = append(ed, setQuery("attempt", g.hostile()))
		}
		return c.GetAttemptLog(ctx, id, g.str(0.6, g.step()), p, ed...)
	}},
	{"getStepOutput", func(ctx context.Context, c *client.APIClient, g *gen, ed []client.RequestEditorFn) (*http.Response, error) {
		id, swapped := g.runID()
		return c.GetStepOutput(ctx, id, g.str(0.6, g.step()), append(ed, swapped...)...)
	}},
	{"listWorkflows", func(ctx context.Context, c *client.APIClient, g *gen, ed []client.RequestEditorFn) (*http.Response, error) {
		return c.ListWorkflows(ctx, &client.ListWorkflowsParams{Cursor: g.cursor("workflows"), Limit: g.limit()}, append(ed, g.rawLimit()...)...)
	}},
	{"getWorkflow", func(ctx context.Context, c *client.APIClient, g *gen, ed []client.RequestEditorFn) (*http.Response, error) {
		return c.GetWorkflow(ctx, g.str(0.5, g.f.workflow), ed...)
	}},
	{"startRun", func(ctx context.Context, c *client.APIClient, g *gen, ed []client.RequestEditorFn) (*http.Response, error) {
		p := &client.StartRunParams{}
		if g.chance(0.4) {
			k := g.headerValue()
			p.IdempotencyKey = &k
		}
		fields := []string{}
		if g.chance(0.5) {
			v := strconv.FormatInt(g.int64(), 10)
			if g.chance(0.3) {
				v = g.jsonNumber()
			}
			fields = append(fields, `"version":`+v)
		}
		if g.chance(0.3) {
			fields = append(fields, `"alias":`+g.oneOf([]string{`"latest"`, `"stable"`, g.jsonString()}))
		}
		if g.chance(0.8) {
			fields = append(fields, `"input":`+g.jsonValue(5))
		}
		if g.chance(0.1) {
			fields = append(fields, g.jsonString()+`:1`)
		}
		body := "{" + strings.Join(fields, ",") + "}"
		switch g.r.IntN(10) {
		case 0:
			body = g.broken(body)
		case 1:
			body = g.jsonValue(2)
		}
		return c.StartRunWithBody(ctx, g.str(0.7, g.f.workflow), p, g.contentType(), strings.NewReader(body), ed...)
	}},
	{"listVersions", func(ctx context.Context, c *client.APIClient, g *gen, ed []client.RequestEditorFn) (*http.Response, error) {
		return c.ListVersions(ctx, g.str(0.7, g.f.workflow), &client.ListVersionsParams{Cursor: g.cursor("versions"), Limit: g.limit()}, append(ed, g.rawLimit()...)...)
	}},
	{"getVersion", func(ctx context.Context, c *client.APIClient, g *gen, ed []client.RequestEditorFn) (*http.Response, error) {
		v := g.int64()
		if g.chance(0.4) {
			v = 1 + g.r.Int64N(2)
		}
		if g.chance(0.2) {
			ed = append(ed, swap("/versions/"+strconv.FormatInt(v, 10), "/versions/"+g.hostile()))
		}
		return c.GetVersion(ctx, g.str(0.7, g.f.workflow), v, ed...)
	}},
	{"listAliases", func(ctx context.Context, c *client.APIClient, g *gen, ed []client.RequestEditorFn) (*http.Response, error) {
		return c.ListAliases(ctx, g.str(0.7, g.f.workflow), &client.ListAliasesParams{Cursor: g.cursor("versions"), Limit: g.limit()}, append(ed, g.rawLimit()...)...)
	}},
	{"getAlias", func(ctx context.Context, c *client.APIClient, g *gen, ed []client.RequestEditorFn) (*http.Response, error) {
		return c.GetAlias(ctx, g.str(0.7, g.f.workflow), g.str(0.6, g.alias()), ed...)
	}},
	{"setAlias", func(ctx context.Context, c *client.APIClient, g *gen, ed []client.RequestEditorFn) (*http.Response, error) {
		v := `{"version":` + strconv.FormatInt(g.int64(), 10) + `}`
		switch g.r.IntN(6) {
		case 0:
			v = g.broken(v)
		case 1:
			v = g.jsonValue(2)
		case 2, 3:
			v = `{"version":` + strconv.FormatInt(1+g.r.Int64N(2), 10) + `}`
		}
		return c.SetAliasWithBody(ctx, g.str(0.7, g.f.workflow), g.str(0.6, g.alias()), g.contentType(), strings.NewReader(v), ed...)
	}},
	{"rollbackAlias", func(ctx context.Context, c *client.APIClient, g *gen, ed []client.RequestEditorFn) (*http.Response, error) {
		return c.RollbackAlias(ctx, g.str(0.7, g.f.workflow), g.str(0.6, g.alias()), ed...)
	}},
}

func (g *gen) alias() string { return g.oneOf([]string{"latest", "stable", "canary"}) }

// gen makes values: valid ones from the target, hostile ones from lists and at
// random. It is used by one goroutine.
type gen struct {
	r *rand.Rand
	f *fuzzTarget
}

func (g *gen) chance(p float64) bool { return g.r.Float64() < p }

func (g *gen) oneOf(s []string) string { return s[g.r.IntN(len(s))] }

// hostileStrings are the classics: what PostgreSQL refuses, what paths and parsers
// trip on, numbers at every edge.
var hostileStrings = []string{
	"", "\x00", "a\x00b", "\xff", "a\xffb", "\xff\xfe", "\x80", "\xed\xa0\x80", "\xed\xb0\x80", "\xc0\xaf", "\xf4\x90\x80\x80",
	"é😀", "\u202e", "\ufffd", "\ufeff", "..", "../../etc/passwd", "%00", "%ff", "%2e%2e%2f", "/", " ", "\t", "<script>",
	"'; DROP TABLE runs; --", `\u0000`, `"\ud800"`, "null", "{}", "[]", "-1", "0", "1", "2", "2147483647", "2147483648",
	"-2147483649", "4294967296", "9223372036854775807", "9223372036854775808", "-9223372036854775809",
	"99999999999999999999999", "1e400", "1e20", "-0", "1.5", "NaN", "Infinity", "0x10", " 1 ", "+1", "01",
	"00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff", "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF",
	"urn:uuid:00000000-0000-0000-0000-000000000000", "sha256:" + strings.Repeat("0", 64), "SHA256:" + strings.Repeat("A", 64),
	"hello", "HELLO", "hello\x00", "a_b", strings.Repeat("a", 63), strings.Repeat("a", 64),
}

// hostile returns a hostile string: from the list, long, random bytes, or a
// list entry glued to random bytes.
func (g *gen) hostile() string {
	switch g.r.IntN(8) {
	case 0:
		return g.long()
	case 1:
		b := make([]byte, g.r.IntN(40))
		for i := range b {
			b[i] = byte(g.r.UintN(256))
		}
		return string(b)
	case 2:
		return g.oneOf(hostileStrings) + g.oneOf(hostileStrings)
	}
	return g.oneOf(hostileStrings)
}

// long returns a string at or around a limit: 255/256 (keys), 512/513 (cursors),
// 1000/1001 (reasons), 4096 (listed inputs), and much longer.
func (g *gen) long() string {
	n := []int{64, 65, 255, 256, 512, 513, 1000, 1001, 4096, 65536, 300_000}[g.r.IntN(11)]
	c := g.oneOf([]string{"a", "\x00", "é", "\xff", "%", "A"})
	return strings.Repeat(c, n/len(c))
}

// str returns valid with probability p, a hostile string otherwise.
func (g *gen) str(p float64, valid string) string {
	if g.chance(p) {
		return valid
	}
	if g.chance(0.2) {
		return valid + g.hostile()
	}
	return g.hostile()
}

// headerValue is a hostile string a client can send as a header value (no control
// characters but tab, which net/http refuses to send).
func (g *gen) headerValue() string {
	return strings.Map(func(r rune) rune {
		if (r < 0x20 && r != '\t') || r == 0x7f {
			return 'x'
		}
		return r
	}, g.hostile())
}

func (g *gen) step() string { return g.oneOf(g.f.steps) }

// runID returns a run: an existing one, an unknown UUID, or a hostile string put in
// place of a UUID by the returned editor.
func (g *gen) runID() (uuid.UUID, []client.RequestEditorFn) {
	switch {
	case g.chance(0.7):
		return g.f.runs[g.r.IntN(len(g.f.runs))], nil
	case g.chance(0.3):
		return uuid.New(), nil
	}
	id := uuid.New()
	return id, []client.RequestEditorFn{swap(id.String(), g.hostile())}
}

// int64 returns an integer at an edge of a type or at random.
func (g *gen) int64() int64 {
	edges := []int64{-1 << 63, -1 << 31, -1, 0, 1, 2, 3, 1<<31 - 1, 1 << 31, 1 << 32, 1 << 53, 1<<63 - 1}
	if g.chance(0.2) {
		return g.r.Int64() - g.r.Int64()
	}
	return edges[g.r.IntN(len(edges))]
}

func (g *gen) limit() *int64 {
	if g.chance(0.3) {
		return nil
	}
	v := g.int64()
	if g.chance(0.5) {
		v = 1 + g.r.Int64N(3)
	}
	return &v
}

// rawLimit sometimes puts a limit the client's int64 cannot hold.
func (g *gen) rawLimit() []client.RequestEditorFn {
	if g.chance(0.1) {
		return []client.RequestEditorFn{setQuery("limit", g.hostile())}
	}
	return nil
}

// cursor returns no cursor, the server's own, an edited one or a forged one.
func (g *gen) cursor(list string) *string {
	own := g.f.cursors[list]
	var c string
	switch g.r.IntN(8) {
	case 0:
		return nil
	case 1, 2:
		c = own
	case 3:
		c = g.f.cursors[g.oneOf([]string{"runs", "workflows", "versions", "events"})] // of another list
	case 4: // one character changed
		i := g.r.IntN(len(own))
		c = own[:i] + string("AZaz09-_"[g.r.IntN(8)]) + own[i+1:]
	case 5: // a document of the right shape, with a hostile key and a made-up MAC
		doc := fmt.Sprintf(`{"v":%s,"l":%q,"a":%s,"s":"%x"}`, g.oneOf([]string{"1", "2"}), list, g.jsonValue(1), g.r.Uint64())
		c = base64.RawURLEncoding.EncodeToString([]byte(doc))
	case 6:
		c = base64.RawURLEncoding.EncodeToString([]byte(g.hostile()))
	default:
		c = g.hostile()
	}
	return &c
}

func (g *gen) contentType() string {
	if g.chance(0.85) {
		return "application/json"
	}
	return g.oneOf([]string{"application/octet-stream", "text/plain", "application/cbor", "application/json; charset=latin1", "", "application/problem+json"})
}

// jsonNumber returns a number literal at an edge of what decoders hold.
func (g *gen) jsonNumber() string {
	return g.oneOf([]string{"0", "-0", "1", "-1", "1.5", "1e400", "-1e400", "1E-400", "2147483648", "9223372036854775808",
		"123456789012345678901234567890", "0.0000000000000000000001", "1e2", `"1"`, "true", "null"})
}

// jsonString returns a JSON string literal built of pieces, some of them ones
// PostgreSQL refuses, some not valid JSON at all.
func (g *gen) jsonString() string {
	pieces := []string{"a", "é", "😀", `\u0000`, `\ud800`, `\udc00`, `\ud83d\ude00`, `\ud800\u0041`, `\udbff\udfff`,
		"\xff", "\xed\xa0\x80", `\\u0000`, `\"`, `\/`, `\n`, `\u001f`, `\uffff`, "$blob", `\u0024blob`, " "}
	if g.chance(0.02) {
		pieces = append(pieces, "\x00", `\U0000`, "\n") // not JSON
	}
	var b strings.Builder
	b.WriteByte('"')
	for range g.r.IntN(6) {
		b.WriteString(g.oneOf(pieces))
	}
	if g.chance(0.05) {
		b.WriteString(strings.Repeat("x", g.r.IntN(5000)))
	}
	b.WriteByte('"')
	return b.String()
}

// jsonValue returns a JSON document of at most depth levels (deeper when nested on
// purpose), made of hostile strings and numbers.
func (g *gen) jsonValue(depth int) string {
	k := g.r.IntN(10)
	if depth <= 0 && k >= 4 && k <= 7 {
		k = 2
	}
	switch k {
	case 0:
		return g.jsonNumber()
	case 1:
		return g.oneOf([]string{"true", "false", "null"})
	case 2, 3:
		return g.jsonString()
	case 4, 5:
		items := make([]string, g.r.IntN(4))
		for i := range items {
			items[i] = g.jsonValue(depth - 1)
		}
		return "[" + strings.Join(items, ",") + "]"
	case 6, 7:
		items := make([]string, g.r.IntN(4))
		for i := range items {
			items[i] = g.jsonString() + ":" + g.jsonValue(depth-1)
		}
		return "{" + strings.Join(items, ",") + "}"
	case 8:
		n := []int{10, 100, 1000, 10001}[g.r.IntN(4)]
		return strings.Repeat("[", n) + g.jsonString() + strings.Repeat("]", n)
	}
	return `{"$blob":{"digest":"sha256:` + strings.Repeat("1", 64) + `","size":1}}`
}

// broken returns doc cut short, doubled or with a byte changed.
func (g *gen) broken(doc string) string {
	if doc == "" {
		return "{"
	}
	switch g.r.IntN(3) {
	case 0:
		return doc[:g.r.IntN(len(doc))]
	case 1:
		return doc + doc
	}
	i := g.r.IntN(len(doc))
	return doc[:i] + string(rune(g.r.IntN(256))) + doc[i+1:]
}

// bundle returns an upload body: a bundle whose manifest holds hostile values, a
// broken archive or noise.
func (g *gen) bundle() []byte {
	switch g.r.IntN(6) {
	case 0:
		return []byte(g.hostile())
	case 1:
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		_, _ = zw.Write([]byte(g.hostile()))
		_ = zw.Close()
		return b.Bytes()
	}
	q := func(valid string) string { // a YAML double-quoted scalar
		return strconv.Quote(g.str(0.85, valid))
	}
	manifest := fmt.Sprintf("name: %s\ndescription: %s\nsteps:\n  - key: %s\n    builtin: %s\n    with: {%s: %s, n: %s}\n  - key: h\n    http: {url: %s, headers: {%s: %s}}\n    needs: [%s]\n",
		q("fuzz"), q("fine"), q("a"), q("echo"), q("k"), q("v"), g.jsonNumber(), q("http://127.0.0.1:1/"), q("X-A"), q("b"), q("a"))
	if g.chance(0.1) {
		manifest = g.broken(manifest)
	}
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	tw := newTar(zw)
	tw.add("cairn.yaml", manifest)
	if g.chance(0.2) {
		tw.add(g.hostile(), "x")
	}
	tw.close()
	_ = zw.Close()
	return b.Bytes()
}

// tarWriter writes a tar archive without a *testing.T (the generator runs in
// goroutines); a hostile entry name the writer refuses is left out.
type tarWriter struct{ tw *tar.Writer }

func newTar(w io.Writer) *tarWriter { return &tarWriter{tw: tar.NewWriter(w)} }

func (t *tarWriter) add(name, body string) {
	if t.tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}) == nil {
		_, _ = t.tw.Write([]byte(body))
	}
}

func (t *tarWriter) close() { _ = t.tw.Close() }
