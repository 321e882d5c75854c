package cairntest

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/client"
)

// DefaultTimeout bounds each call of a Server's helpers that waits (Run, WaitRun,
// Deploy), unless WithTimeout sets another; the test's own deadline (go test
// -timeout) bounds it too.
const DefaultTimeout = 2 * time.Minute

// Server is a running Cairn, made by Start and stopped when its test ends.
type Server struct {
	// URL is the API's address, http://127.0.0.1:PORT.
	URL string
	// Tokens are bearer tokens of each role the server accepts.
	Tokens Tokens
	// Client is a client of the API that sends Tokens.Operator: it deploys,
	// starts, signals and cancels runs. Use NewClient for another role.
	Client *client.Client

	timeout time.Duration
}

// Tokens are the server's bearer tokens, one per role (docs/api.md).
type Tokens struct {
	// Viewer reads: runs, steps, outputs, logs.
	Viewer string
	// Operator does what viewers do, and deploys, starts and acts on runs.
	Operator string
	// Admin does what operators do, and sets secrets and limits.
	Admin string
}

// Option changes how Start runs the server.
type Option func(*options)

// options are what the Options set.
type options struct {
	docker  *DockerConfig
	logger  *slog.Logger
	timeout time.Duration
}

// WithLogger sends the server's log to logger as well as to the test's output on
// failure. Default: kept in memory and shown only when the test fails.
func WithLogger(logger *slog.Logger) Option {
	return func(o *options) { o.logger = logger }
}

// WithTimeout bounds each call of the Server's helpers that waits; default
// DefaultTimeout.
func WithTimeout(d time.Duration) Option {
	return func(o *options) { o.timeout = d }
}

// Start starts a Cairn for t and returns it once it answers; t.Cleanup stops it
// and removes its data. A server that cannot start fails t (t.Fatal) with the
// reason: PostgreSQL's binaries missing, a Docker engine that does not answer
// (WithDocker), and so on. Start is safe to call from parallel tests; each call
// starts its own server.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	o := options{timeout: DefaultTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	tokens := Tokens{Viewer: newToken(), Operator: newToken(), Admin: newToken()}
	logs := newLogTail(o.logger)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("cairntest: the server's log (last %d KiB):\n%s", logTailSize>>10, logs.String())
		}
	})
	var url string
	var err error
	if o.docker != nil {
		url, err = startDocker(t, *o.docker, tokens, logs)
	} else {
		url, err = startLocal(t, tokens, logs.logger())
	}
	if err != nil {
		t.Fatalf("cairntest: start: %v", err)
	}
	s := &Server{URL: url, Tokens: tokens, timeout: o.timeout}
	s.Client = s.NewClient(t, tokens.Operator)
	return s
}

// NewClient returns a client of the server that sends token (one of s.Tokens, or
// a token of your own from WithDocker's environment).
func (s *Server) NewClient(t testing.TB, token string) *client.Client {
	t.Helper()
	cl, err := client.New(s.URL, token)
	if err != nil {
		t.Fatalf("cairntest: %v", err)
	}
	return cl
}

// Deploy validates the bundle folder dir, uploads it and moves its workflow's
// alias latest to the version, as `cairn deploy DIR` does; it returns the
// server's answer. An invalid bundle or a refused upload fails t, naming every
// problem.
func (s *Server) Deploy(t testing.TB, dir string) *client.UploadResult {
	t.Helper()
	ctx, cancel := s.context(t)
	defer cancel()
	archive := bundle.PackStream(ctx, dir)
	res, err := s.Client.UploadBundle(ctx, archive)
	// A bundle that does not pack explains a failed upload better than the
	// transport's error.
	if perr := archive.Close(); perr != nil {
		t.Fatalf("cairntest: deploy %s: %v", dir, perr)
	}
	if err != nil {
		t.Fatalf("cairntest: deploy %s: %v", dir, err)
	}
	return res
}

// StartRun starts a run of workflow's latest version with input (any value that
// encodes to JSON; nil is null) and returns it at once.
func (s *Server) StartRun(t testing.TB, workflow string, input any) *client.Run {
	t.Helper()
	ctx, cancel := s.context(t)
	defer cancel()
	run, err := s.Client.CreateRun(ctx, workflow, client.StartRunBody{Input: input}, "")
	if err != nil {
		t.Fatalf("cairntest: %v", err)
	}
	return run
}

// WaitRun waits until the run id has ended and returns it, whatever its status:
// check Status and Error. A run still going after the timeout (WithTimeout)
// fails t.
func (s *Server) WaitRun(t testing.TB, id string) *client.Run {
	t.Helper()
	uid := parseRunID(t, id)
	ctx, cancel := s.context(t)
	defer cancel()
	run, err := s.Client.WaitRun(ctx, uid, client.WaitOptions{})
	if err != nil {
		t.Fatalf("cairntest: %v", err)
	}
	return run
}

// Run starts a run of workflow with input and waits for its end (StartRun, then
// WaitRun).
func (s *Server) Run(t testing.TB, workflow string, input any) *client.Run {
	t.Helper()
	return s.WaitRun(t, s.StartRun(t, workflow, input).Id)
}

// Output returns the output of step in run id, as the handler produced it (an
// output of any size: it is read whole into memory, so keep test outputs
// reasonable). A step without an output fails t.
func (s *Server) Output(t testing.TB, id, step string) []byte {
	t.Helper()
	uid := parseRunID(t, id)
	ctx, cancel := s.context(t)
	defer cancel()
	resp, err := s.Client.GetStepOutput(ctx, uid, step)
	if err != nil {
		t.Fatalf("cairntest: output of %s in run %s: %v", step, id, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("cairntest: output of %s in run %s: %v", step, id, err)
	}
	return b
}

// OutputJSON decodes the output of step in run id into v (see encoding/json).
func (s *Server) OutputJSON(t testing.TB, id, step string, v any) {
	t.Helper()
	if err := json.Unmarshal(s.Output(t, id, step), v); err != nil {
		t.Fatalf("cairntest: output of %s in run %s: %v", step, id, err)
	}
}

// parseRunID parses a run's ID (client.Run's Id) or fails t.
func parseRunID(t testing.TB, id string) uuid.UUID {
	t.Helper()
	uid, err := uuid.Parse(id)
	if err != nil {
		t.Fatalf("cairntest: run ID %q: %v", id, err)
	}
	return uid
}

// context bounds one helper's call by s.timeout and by t's deadline (go test
// -timeout), and ends when t does.
func (s *Server) context(t testing.TB) (context.Context, context.CancelFunc) {
	ctx := t.Context()
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if deadline, ok := d.Deadline(); ok && time.Until(deadline) < s.timeout {
			return context.WithDeadline(ctx, deadline)
		}
	}
	return context.WithTimeout(ctx, s.timeout)
}

// newToken returns 32 random bytes, base64url: unguessable, shell-safe, and a
// valid secret key (secrets.ParseKeyring) too.
func newToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// tempDir makes a folder for the server's data, searchable by other accounts
// (PostgreSQL runs as one when the test runs as root; sandboxed exec handlers as
// another), removed by t.Cleanup.
func tempDir(t testing.TB) (string, error) {
	dir, err := os.MkdirTemp("", "cairntest-")
	if err != nil {
		return "", err
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", fmt.Errorf("data folder: %w", err)
	}
	return dir, nil
}
