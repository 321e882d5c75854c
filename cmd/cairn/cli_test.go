package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
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

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/client"
	"github.com/cairnrun/cairn/internal/testenv"
)

// cliBundle is a running server (API and dispatcher) on a fresh database, with the
// tokens it knows, and a way to run the CLI against it.
type cliBundle struct {
	server, viewer, operator, admin string
	// alice and bob are named operator tokens (operator:alice:<token>).
	alice, bob string
	// dbURL and blobs are the server's database and blob store.
	dbURL string
	blobs blobstore.Store
}

// setupCLI starts a real server in-process, as `cairn serve` runs it, on a fresh
// migrated database and a file blob store, and stops it when the test ends.
func setupCLI(t *testing.T) *cliBundle {
	t.Helper()
	return setupCLIWith(t, nil)
}

// setupCLIWith is setupCLI with the server's parts changed by edit (when not nil).
func setupCLIWith(t *testing.T, edit func(*serverParts)) *cliBundle {
	t.Helper()
	dbURL := testenv.DatabaseURL(t)
	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})

	ctx, cancel := context.WithCancel(context.Background())
	store, err := openStore(ctx, dbURL, logger, 0, false)
	require.NoError(t, err)
	blobs, err := blobstore.NewFile(t.TempDir(), nil)
	require.NoError(t, err)
	b := &cliBundle{viewer: newToken(), operator: newToken(), admin: newToken(), alice: newToken(), bob: newToken(),
		dbURL: dbURL, blobs: blobs}
	tokens := &api.Tokens{}
	require.NoError(t, tokens.Add(api.RoleViewer, b.viewer))
	require.NoError(t, tokens.Add(api.RoleOperator, b.operator))
	require.NoError(t, tokens.AddNamed(api.RoleAdmin, "root", b.admin))
	require.NoError(t, tokens.AddNamed(api.RoleOperator, "alice", b.alice))
	require.NoError(t, tokens.AddNamed(api.RoleOperator, "bob", b.bob))

	addrc := make(chan string, 1)
	done := make(chan error, 1)
	parts := serverParts{
		listen: "127.0.0.1:0", dbURL: dbURL, store: store, blobs: blobs, tokens: tokens, logger: logger,
		rt: runtimeFlags{concurrency: 8, leaseTTL: 30 * time.Second, inlineLimit: 256 << 10,
			shutdownGrace: 5 * time.Second, signingKey: newToken(), cacheDir: t.TempDir(), secretKey: newToken()},
	}
	if edit != nil {
		edit(&parts)
	}
	go func() {
		done <- runServer(ctx, parts, func(addr string) { addrc <- addr })
	}()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
		store.Close()
	})
	select {
	case addr := <-addrc:
		b.server = "http://" + addr
	case err := <-done:
		t.Fatalf("server did not start: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("server did not start within 30s")
	}
	return b
}

// cli runs the command line with CAIRN_SERVER and the operator's CAIRN_TOKEN set,
// returning stdout and the error run returns (what main turns into an exit code).
func (b *cliBundle) cli(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	vars := map[string]string{"CAIRN_SERVER": b.server, "CAIRN_TOKEN": b.operator}
	var stdout, stderr bytes.Buffer
	err := run(ctx, args, func(k string) string { return vars[k] }, &stdout, &stderr)
	if stderr.Len() > 0 {
		t.Logf("cairn %s: stderr:\n%s", strings.Join(args, " "), stderr.String())
	}
	return stdout.String(), err
}

// mustCLI is cli for commands that must succeed.
func (b *cliBundle) mustCLI(t *testing.T, args ...string) string {
	t.Helper()
	out, err := b.cli(t, args...)
	require.NoError(t, err, "cairn %s", strings.Join(args, " "))
	return out
}

// deployed reads the key: value lines that deploy prints.
func deployed(t *testing.T, out string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for line := range strings.Lines(out) {
		k, v, ok := strings.Cut(line, ":")
		if ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	require.Contains(t, m, "digest", "deploy output:\n%s", out)
	return m
}

const helloDir = "../../examples/hello"

func TestCLIDeploySameBundleSameVersion(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)

	first := deployed(t, b.mustCLI(t, "deploy", helloDir))
	require.Equal(t, "hello", first["workflow"])
	require.Equal(t, "1", first["version"])
	require.Equal(t, "created", first["status"])
	require.True(t, strings.HasPrefix(first["digest"], "sha256:"))

	again := deployed(t, b.mustCLI(t, "deploy", helloDir))
	require.Equal(t, first["version"], again["version"])
	require.Equal(t, first["digest"], again["digest"])
	require.Equal(t, "unchanged", again["status"])

	// The same files with other modification times: the same tree, digest and version.
	copyDir := filepath.Join(t.TempDir(), "hello")
	require.NoError(t, os.CopyFS(copyDir, os.DirFS(helloDir)))
	later := time.Now().Add(48 * time.Hour)
	require.NoError(t, filepath.WalkDir(copyDir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Chtimes(p, later, later)
	}))
	touched := deployed(t, b.mustCLI(t, "deploy", copyDir))
	require.Equal(t, first["digest"], touched["digest"])
	require.Equal(t, first["version"], touched["version"])
	require.Equal(t, "unchanged", touched["status"])

	// An archive file is sent as it is.
	archive := filepath.Join(t.TempDir(), "hello.tar.gz")
	f, err := os.Create(archive)
	require.NoError(t, err)
	_, err = bundle.Pack(t.Context(), helloDir, f)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	fromFile := deployed(t, b.mustCLI(t, "deploy", archive))
	require.Equal(t, first["digest"], fromFile["digest"])
	require.Equal(t, "unchanged", fromFile["status"])

	out := b.mustCLI(t, "versions", "list", "hello")
	require.Contains(t, out, first["digest"])
}

func TestCLIRunHello(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	b.mustCLI(t, "deploy", helloDir)

	out := b.mustCLI(t, "run", "start", "hello", "--input", `{"name":"ada"}`, "--wait")
	id := strings.TrimSpace(strings.SplitN(out, "\n", 2)[0])
	_, err := uuid.Parse(id)
	require.NoError(t, err, "the first line of run start is the run ID:\n%s", out)
	require.Contains(t, out, "succeeded")
	for _, step := range []string{"greet-en", "greet-fr", "join"} {
		require.Regexp(t, `(?m)^`+step+` +succeeded +1/2 `, out)
	}

	joined := b.mustCLI(t, "run", "output", id, "join")
	var msg struct{ Message string }
	require.NoError(t, json.Unmarshal([]byte(joined), &msg), "join output %q", joined)
	require.Equal(t, "Hello, ada! / Bonjour, ada!", msg.Message)

	file := filepath.Join(t.TempDir(), "out.json")
	b.mustCLI(t, "run", "output", id, "join", "-o", file)
	written, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Equal(t, joined, string(written))

	require.Contains(t, b.mustCLI(t, "run", "logs", id, "greet-en"), "greeting Hello for ada")
	require.Regexp(t, `(?m)^hello +1 `, b.mustCLI(t, "workflows", "list"))
	require.Contains(t, b.mustCLI(t, "run", "list", "--workflow", "hello"), id)

	var got struct {
		Run   client.Run    `json:"run"`
		Steps []client.Step `json:"steps"`
	}
	require.NoError(t, json.Unmarshal([]byte(b.mustCLI(t, "run", "get", id, "--output", "json")), &got))
	require.Equal(t, client.RunStatusSucceeded, got.Run.Status)
	require.Len(t, got.Steps, 3)

	// Input from a file; the same Idempotency-Key gives the same run.
	input := filepath.Join(t.TempDir(), "input.json")
	require.NoError(t, os.WriteFile(input, []byte(`{"name":"grace"}`), 0o644))
	again := b.mustCLI(t, "run", "start", "hello", "--input", "@"+input, "--idempotency-key", "k1")
	require.Equal(t, again, b.mustCLI(t, "run", "start", "hello", "--input", "@"+input, "--idempotency-key", "k1"))
	require.NotEqual(t, id+"\n", again)
	_, err = b.cli(t, "run", "start", "hello", "--input", `{"name":`)
	require.ErrorContains(t, err, "input is not valid JSON")

	// Watching a finished run replays its events and ends.
	watched := b.mustCLI(t, "run", "watch", id)
	require.Contains(t, watched, "run.created")
	require.Contains(t, watched, "run.succeeded")
}

func TestCLIRunFailedExitsNonZero(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cairn.yaml"), []byte(`name: always-fails
steps:
  - key: boom
    builtin: fail
    retry: {max_attempts: 1}
    with: {retryable: false, message: "boom on purpose"}
`), 0o644))
	b.mustCLI(t, "deploy", dir)

	out, err := b.cli(t, "run", "start", "always-fails", "--wait")
	var ended *runEndedError
	require.True(t, errors.As(err, &ended), "want a *runEndedError, got %v", err)
	require.Equal(t, client.RunStatusFailed, ended.Status)
	require.Equal(t, 1, exitCode(err))
	require.Regexp(t, `(?m)^boom +failed +1/1 .*boom on purpose`, out)
}

// TestCLIListLimits: lists show at most --limit items, and as JSON the API's items.
func TestCLIListLimits(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	for _, name := range []string{"wf-b", "wf-a", "wf-c"} {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "cairn.yaml"), []byte("name: "+name+"\nsteps:\n  - key: a\n    builtin: noop\n"), 0o644))
		b.mustCLI(t, "deploy", dir)
	}
	var ids []string
	for range 4 {
		out := b.mustCLI(t, "run", "start", "wf-a", "--input", `{"big":12345678901234567890}`, "--wait")
		ids = append(ids, strings.TrimSpace(strings.SplitN(out, "\n", 2)[0]))
	}

	out := b.mustCLI(t, "run", "list", "--limit", "3")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 4, "a header and three runs:\n%s", out)
	for i, id := range []string{ids[3], ids[2], ids[1]} {
		require.True(t, strings.HasPrefix(lines[i+1], id+" "), "newest first:\n%s", out)
	}

	var page struct {
		Items []map[string]json.RawMessage `json:"items"`
	}
	require.NoError(t, json.Unmarshal([]byte(b.mustCLI(t, "run", "list", "--workflow", "wf-a", "--limit", "0", "-o", "json")), &page))
	require.Len(t, page.Items, 4)
	require.Contains(t, string(page.Items[0]["input"]), "12345678901234567890", "the API's JSON, numbers as they are")

	out = b.mustCLI(t, "workflows", "list", "--limit", "2")
	require.Regexp(t, `^NAME +LATEST +UPDATED +PAUSED +DESCRIPTION\nwf-a +1 .*\nwf-b +1 .*\n$`, out)
	require.Contains(t, b.mustCLI(t, "versions", "list", "wf-c"), "sha256:")
}

// TestCLIPauseResume: cairn workflow pause|resume and cairn run pause|resume.
func TestCLIPauseResume(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cairn.yaml"), []byte("name: held\nsteps:\n  - {key: a, builtin: noop}\n  - {key: b, needs: [a], builtin: noop}\n"), 0o644))
	b.mustCLI(t, "deploy", dir)

	require.Equal(t, "workflow held paused by operator\n", b.mustCLI(t, "workflow", "pause", "held", "--reason", "maintenance"))
	require.Regexp(t, `(?m)^held +1 .* paused *$`, b.mustCLI(t, "workflows", "list"))
	id := strings.TrimSpace(b.mustCLI(t, "run", "start", "held"))
	out := b.mustCLI(t, "run", "get", id)
	require.Regexp(t, `(?m)^status\s+paused`, out)
	require.Regexp(t, `(?m)^a +ready +0/1 .*paused`, out)

	// Paused by the operator too: the workflow's resume does not release it.
	require.Equal(t, "run "+id+" paused (by an operator)\n", b.mustCLI(t, "run", "pause", id))
	require.Equal(t, "workflow held resumed\n", b.mustCLI(t, "workflow", "resume", "held"))
	require.Regexp(t, `(?m)^status\s+paused`, b.mustCLI(t, "run", "get", id))

	// Resumed: no longer paused; a dispatcher may have claimed it, or finished it,
	// by the time the answer is written.
	require.Regexp(t, "^run "+id+" (pending|running|succeeded)\n$", b.mustCLI(t, "run", "resume", id))
	require.Contains(t, b.mustCLI(t, "run", "watch", id), "run.succeeded", "watch follows the run to its end")
	require.Regexp(t, `(?m)^b +succeeded +1/1 `, b.mustCLI(t, "run", "get", id))
	_, err := b.cli(t, "run", "resume", id)
	require.Equal(t, "invalid_run_state", client.ProblemCode(err), "%v", err)
	_, err = b.cli(t, "run", "pause", id)
	require.Equal(t, "invalid_run_state", client.ProblemCode(err), "%v", err)
	_, err = b.cli(t, "workflow", "pause", "nope")
	require.Equal(t, "not_found", client.ProblemCode(err), "%v", err)
}

func TestCLIViewerCannotDeploy(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)

	_, err := b.cli(t, "deploy", helloDir, "--token", b.viewer)
	var p *client.Problem
	require.True(t, errors.As(err, &p), "want a *client.Problem, got %v", err)
	require.EqualValues(t, http.StatusForbidden, p.Status)
	require.Equal(t, "forbidden", p.Code)
	require.Contains(t, err.Error(), "forbidden (HTTP 403): this operation needs the operator role; the token has viewer")

	// Reads are fine.
	out, err := b.cli(t, "workflows", "list", "--token", b.viewer)
	require.NoError(t, err)
	require.NotContains(t, out, "hello")

	_, err = b.cli(t, "workflows", "list", "--token", "not-a-known-token-at-all")
	require.Equal(t, "unauthorized", client.ProblemCode(err))
}

func TestCLIFindsServer(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	creds := filepath.Join(dir, "credentials")
	require.NoError(t, os.WriteFile(creds, []byte("# from cairn dev\nCAIRN_SERVER=http://127.0.0.1:1\nexport CAIRN_VIEWER_TOKEN='v-token'\nCAIRN_TOKEN=\"op-token\"\n"), 0o600))

	tests := []struct {
		name                       string
		vars                       map[string]string
		server, token, credentials string
		wantErr                    string
	}{
		{name: "credentials file", credentials: creds},
		{name: "environment", vars: map[string]string{"CAIRN_SERVER": "http://127.0.0.1:1", "CAIRN_TOKEN": "op-token"}, credentials: "/nonexistent"},
		{name: "flags beat environment", vars: map[string]string{"CAIRN_SERVER": "http://elsewhere", "CAIRN_TOKEN": "other"}, server: "http://127.0.0.1:1", token: "op-token"},
		{name: "nothing", credentials: filepath.Join(dir, "missing"), wantErr: "no server to talk to"},
		{name: "token only", token: "op-token", credentials: creds, wantErr: "no server"},
		{name: "server only", vars: map[string]string{"CAIRN_SERVER": "http://127.0.0.1:1"}, credentials: creds, wantErr: "no token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newCLI(func(k string) string { return tt.vars[k] }, io.Discard, io.Discard)
			c.server, c.token, c.credentials = tt.server, tt.token, tt.credentials
			cl, err := c.client()
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.NotNil(t, cl)
		})
	}
}

// TestWatchReconnects drops the event stream after two events and checks that
// watch comes back with Last-Event-ID, prints each event once, and ends with the run.
func TestWatchReconnects(t *testing.T) {
	t.Parallel()
	id := uuid.New()
	var mu sync.Mutex
	var lastIDs []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/runs/" + id.String() + "/events/stream":
		case "/v1/runs/" + id.String() + "/steps":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"items":[{"key":"a","status":"succeeded","attempts":1,"max_attempts":1}]}`)
			return
		default:
			status := "running"
			mu.Lock()
			if len(lastIDs) == 2 {
				status = "succeeded"
			}
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":%q,"workflow":"w","version":1,"status":%q,"revision":3,"created_at":"2026-01-01T00:00:00Z"}`, id, status)
			return
		}
		mu.Lock()
		lastIDs = append(lastIDs, r.Header.Get("Last-Event-ID"))
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		event := func(seq int, typ string) {
			fmt.Fprintf(w, "id: %d\nevent: %s\ndata: {\"seq\":%d,\"type\":%q,\"data\":{},\"created_at\":\"2026-01-01T00:00:00Z\"}\n\n", seq, typ, seq, typ)
		}
		fmt.Fprint(w, ": stream\n\n")
		if r.Header.Get("Last-Event-ID") == "" {
			event(1, "run.created")
			event(2, "step.started")
			return // the stream drops
		}
		event(2, "step.started") // a replayed duplicate is skipped
		event(3, "run.succeeded")
	}))
	t.Cleanup(srv.Close)

	cl, err := client.New(srv.URL, "token")
	require.NoError(t, err)
	var out bytes.Buffer
	c := newCLI(func(string) string { return "" }, &out, io.Discard)
	require.NoError(t, c.watch(t.Context(), cl, id))
	require.Regexp(t, `(?s)^[0-9:.]+  #1 +run\.created\n[0-9:.]+  #2 +step\.started\n[0-9:.]+  #3 +run\.succeeded\n\n`, out.String())
	require.Regexp(t, `(?m)^status +succeeded$`, out.String())
	require.Regexp(t, `(?m)^a +succeeded +1/1 `, out.String())
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"", "2"}, lastIDs)
}

// syncBuffer is a bytes.Buffer safe for the server's concurrent logging.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestCLIBulkCancel: `cairn run list … --cancel` cancels every run the filter
// matches through a bulk operation, waits for it and says what it did; without a
// filter it refuses unless --all.
func TestCLIBulkCancel(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cairn.yaml"), []byte(`name: sleepy
steps:
  - {key: nap, builtin: sleep, with: {duration: 1h}}
`), 0o644))
	b.mustCLI(t, "deploy", dir)
	var ids []string
	for range 3 {
		out := b.mustCLI(t, "run", "start", "sleepy")
		ids = append(ids, strings.TrimSpace(strings.SplitN(out, "\n", 2)[0]))
	}

	_, err := b.cli(t, "run", "list", "--cancel")
	require.ErrorContains(t, err, "--all")

	out := b.mustCLI(t, "run", "list", "--workflow", "sleepy", "--cancel")
	require.Regexp(t, `operation \S+ succeeded: 3 runs, 3 applied, 0 skipped`, out)
	for _, id := range ids {
		require.Regexp(t, `(?m)^`+id+` +sleepy +1 +canceled `, b.mustCLI(t, "run", "list", "--workflow", "sleepy"))
	}
	// Again: nothing left to cancel, each run skipped.
	out = b.mustCLI(t, "run", "list", "--workflow", "sleepy", "--cancel")
	require.Regexp(t, `succeeded: 3 runs, 0 applied, 3 skipped`, out)
}

// TestCLIRetryAndRerun: a run whose middle step failed is retried onto a fixed
// version and succeeds; a dry rerun from that step prints the plan and starts
// nothing, a rerun prints it and the new run.
func TestCLIRetryAndRerun(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	deploy := func(bStep string) {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "cairn.yaml"), []byte(`name: fixme
steps:
  - {key: a, builtin: noop}
  - key: b
    needs: [a]
    retry: {max_attempts: 1}
`+bStep+`
  - {key: c, needs: [b], builtin: noop}
`), 0o644))
		b.mustCLI(t, "deploy", dir)
	}
	deploy("    builtin: fail\n    with: {retryable: false, message: broken}")
	out, err := b.cli(t, "run", "start", "fixme", "--wait")
	require.Error(t, err, "%s", out)
	id := strings.TrimSpace(strings.SplitN(out, "\n", 2)[0])
	deploy("    builtin: noop")

	out = b.mustCLI(t, "run", "retry", id, "--version", "latest") // an alias: deploy moved latest to 2
	require.Equal(t, "run "+id+" running (version 2, 2 of 3 steps to run)\n", out)
	_, err = b.cli(t, "run", "retry", id)
	require.ErrorContains(t, err, "invalid_run_state")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		out, err := b.cli(t, "run", "get", id)
		assert.NoError(c, err)
		assert.Regexp(c, `(?m)^status +succeeded`, out)
	}, time.Minute, 100*time.Millisecond, "waiting for the retried run to succeed")

	out = b.mustCLI(t, "run", "rerun", id, "--from", "b", "--input", `{"n":2}`, "--dry-run")
	require.Equal(t, "reuse: a\nrun: b, c\n", out)
	list := b.mustCLI(t, "run", "list", "-o", "json")
	var runs rawItems
	require.NoError(t, json.Unmarshal([]byte(list), &runs))
	require.Len(t, runs.Items, 1, "a dry run starts nothing")

	out = b.mustCLI(t, "run", "rerun", id, "--from", "b")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Equal(t, []string{"reuse: a", "run: b, c"}, lines[:2])
	_, err = uuid.Parse(lines[2])
	require.NoError(t, err, "the new run's ID: %q", lines[2])

	_, err = b.cli(t, "run", "rerun", id, "--from", "nope")
	require.ErrorContains(t, err, "body.from_step")
}

// TestCLIRunLabelsAndSearch: runs started with -l carry their labels; run list
// finds them by label, status, time, error code and version, all at once.
func TestCLIRunLabelsAndSearch(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cairn.yaml"), []byte(`name: sometimes-fails
steps:
  - key: boom
    builtin: fail
    retry: {max_attempts: 1}
    with: {retryable: false, message: "boom on purpose"}
`), 0o644))
	b.mustCLI(t, "deploy", dir)
	b.mustCLI(t, "deploy", helloDir)

	start := func(args ...string) string {
		out, _ := b.cli(t, append([]string{"run", "start"}, args...)...) // a failed run's --wait is an error
		return strings.TrimSpace(strings.SplitN(out, "\n", 2)[0])
	}
	acmeFailed := start("sometimes-fails", "-l", "tenant=acme", "--label", "batch=a=1", "--wait")
	start("sometimes-fails", "-l", "tenant=globex", "--wait")
	acmeOK := start("hello", "-l", "tenant=acme", "--input", `{"name":"x"}`, "--wait")

	out := b.mustCLI(t, "run", "list", "-l", "tenant=acme", "--status", "failed", "--since", "24h")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, "a header and one run:\n%s", out)
	require.Regexp(t, `LABELS$`, lines[0])
	require.True(t, strings.HasPrefix(lines[1], acmeFailed+" "), "%s", out)
	require.True(t, strings.HasSuffix(lines[1], " batch=a=1,tenant=acme"), "%s", out)

	// Both of acme's runs, and none when the window is over.
	out = b.mustCLI(t, "run", "list", "-l", "tenant=acme", "--since", time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), "-o", "json")
	var page struct {
		Items []struct {
			ID     string            `json:"id"`
			Labels map[string]string `json:"labels"`
		} `json:"items"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &page))
	require.Len(t, page.Items, 2)
	require.Equal(t, acmeOK, page.Items[0].ID)
	require.Equal(t, map[string]string{"tenant": "acme"}, page.Items[0].Labels)
	out = b.mustCLI(t, "run", "list", "-l", "tenant=acme", "--until", "24h")
	require.Equal(t, 1, strings.Count(out, "\n"), "a header only:\n%s", out)

	// The error code of a failed run is its step's; the version needs the workflow.
	out = b.mustCLI(t, "run", "list", "--error-code", "failed", "--workflow", "sometimes-fails", "--version", "1", "-l", "tenant=acme")
	require.Contains(t, out, acmeFailed)
	require.Equal(t, 2, strings.Count(out, "\n"), "%s", out)
	_, err := b.cli(t, "run", "list", "--version", "1")
	require.ErrorContains(t, err, "--version needs --workflow")
	_, err = b.cli(t, "run", "list", "--since", "yesterday")
	require.ErrorContains(t, err, "--since")
	_, err = b.cli(t, "run", "list", "-l", "Tenant=acme")
	require.Equal(t, "validation_failed", client.ProblemCode(err))
	require.ErrorContains(t, err, "query.label[0]")

	// run get shows the labels.
	out, _ = b.cli(t, "run", "get", acmeFailed) // a failed run's get is an error
	require.Regexp(t, `(?m)^labels +batch=a=1,tenant=acme$`, out)
	_, err = b.cli(t, "run", "start", "hello", "-l", "tenant")
	require.ErrorContains(t, err, "want key=value")
}

// TestCLIPromoteRollback: deploy --no-promote leaves latest, promote moves an alias,
// run start --version takes a number or an alias, rollback walks latest back.
func TestCLIPromoteRollback(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	bundleDir := func(steps int) string {
		dir := t.TempDir()
		m := "name: shop\nsteps:\n"
		for i := range steps {
			m += fmt.Sprintf("  - {key: s%d, builtin: noop}\n", i)
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, "cairn.yaml"), []byte(m), 0o644))
		return dir
	}
	v1, v2 := bundleDir(1), bundleDir(2)
	require.Equal(t, "moved to this version", deployed(t, b.mustCLI(t, "deploy", v1))["latest"])
	second := deployed(t, b.mustCLI(t, "deploy", v2, "--no-promote"))
	require.Equal(t, "2", second["version"])
	require.Equal(t, "unchanged (--no-promote)", second["latest"])
	require.Regexp(t, `(?m)^latest +1 `, b.mustCLI(t, "workflows", "aliases", "shop"))

	runVersion := func(args ...string) int64 {
		t.Helper()
		id := strings.TrimSpace(b.mustCLI(t, append([]string{"run", "start", "shop"}, args...)...))
		var got struct {
			Run client.Run `json:"run"`
		}
		require.NoError(t, json.Unmarshal([]byte(b.mustCLI(t, "run", "get", id, "--output", "json")), &got))
		return got.Run.Version
	}
	require.EqualValues(t, 1, runVersion())

	require.Equal(t, "shop latest -> version 2 (was 1)\n", b.mustCLI(t, "promote", "shop", "2"))
	require.Equal(t, "shop stable -> version 1\n", b.mustCLI(t, "promote", "shop", "1", "--alias", "stable"))
	require.EqualValues(t, 2, runVersion())
	require.EqualValues(t, 1, runVersion("--version", "stable"))
	require.EqualValues(t, 2, runVersion("--version", "2"))
	_, err := b.cli(t, "run", "start", "shop", "--version", "canary")
	require.ErrorContains(t, err, `workflow "shop" has no alias "canary"`)
	_, err = b.cli(t, "promote", "shop", "stable")
	require.ErrorContains(t, err, "not a version number")
	_, err = b.cli(t, "promote", "shop", "9")
	require.Equal(t, "validation_failed", client.ProblemCode(err))

	aliases := b.mustCLI(t, "workflows", "aliases", "shop")
	require.Regexp(t, `(?m)^latest +2 `, aliases)
	require.Regexp(t, `(?m)^stable +1 `, aliases)

	require.Equal(t, "shop latest -> version 1 (was 2)\n", b.mustCLI(t, "rollback", "shop"))
	require.EqualValues(t, 1, runVersion())
	_, err = b.cli(t, "rollback", "shop")
	require.Equal(t, "nothing_to_roll_back", client.ProblemCode(err), "%v", err)
	_, err = b.cli(t, "rollback", "shop", "--alias", "canary")
	require.Equal(t, "not_found", client.ProblemCode(err), "%v", err)

	// Redeploying the second bundle makes it latest again.
	again := deployed(t, b.mustCLI(t, "deploy", v2))
	require.Equal(t, "unchanged", again["status"])
	require.Equal(t, "moved to this version", again["latest"])
	require.EqualValues(t, 2, runVersion())
}

func TestCLISchedule(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	dir := t.TempDir()
	// Hourly on January 1st only: it does not fire while the test runs.
	m := "name: clock\nsteps: [{key: a, builtin: noop}]\nschedules:\n  - {name: newyear, cron: \"0 * 1 1 *\", timezone: Europe/Paris}\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cairn.yaml"), []byte(m), 0o644))
	b.mustCLI(t, "deploy", dir)

	list := b.mustCLI(t, "schedule", "list", "--workflow", "clock")
	require.Regexp(t, `(?m)^1 +clock +newyear +0 \* 1 1 \* +Europe/Paris +skip +active `, list)

	require.Contains(t, b.mustCLI(t, "schedule", "pause", "clock/newyear"), "schedule 1 clock/newyear paused")
	require.Regexp(t, `(?m)^1 .* paused `, b.mustCLI(t, "schedule", "list"))
	require.Contains(t, b.mustCLI(t, "schedule", "resume", "1"), "schedule 1 clock/newyear active")

	out := b.mustCLI(t, "schedule", "trigger", "clock/newyear")
	require.Regexp(t, `^run [0-9a-f-]{36} (pending|running|succeeded) \(clock version 1\)`, out)

	require.Equal(t, "24 fire times: 24 runs created, 0 skipped (had their run already)\n",
		b.mustCLI(t, "schedule", "backfill", "clock/newyear", "--from", "2026-01-01T00:00:00+01:00", "--to", "2026-01-02T00:00:00+01:00"))
	require.Equal(t, "24 fire times: 0 runs created, 24 skipped (had their run already)\n",
		b.mustCLI(t, "schedule", "backfill", "1", "--from", "2026-01-01T00:00:00+01:00", "--to", "2026-01-02T00:00:00+01:00"))
	var runs struct{ Items []client.Run }
	require.NoError(t, json.Unmarshal([]byte(b.mustCLI(t, "run", "list", "--label", "schedule=newyear", "--output", "json")), &runs))
	require.Len(t, runs.Items, 25)

	_, err := b.cli(t, "schedule", "backfill", "1", "--from", "yesterday", "--to", "2026-01-02")
	require.ErrorContains(t, err, "--from")
	_, err = b.cli(t, "schedule", "pause", "clock/nope")
	require.ErrorContains(t, err, `no schedule "nope"`)
	_, err = b.cli(t, "schedule", "trigger", "999")
	require.Equal(t, "not_found", client.ProblemCode(err), "%v", err)
}
