package cairntest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/cairntest"
	"github.com/cairnrun/cairn/client"
)

// writeBundle writes a bundle folder: cairn.yaml and the files, paths relative to
// it (a file under bin/ is executable).
func writeBundle(t *testing.T, manifest string, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cairn.yaml"), []byte(manifest), 0o644))
	for name, content := range files {
		path := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		mode := os.FileMode(0o644)
		if strings.HasPrefix(name, "bin/") {
			mode = 0o755
		}
		require.NoError(t, os.WriteFile(path, []byte(content), mode))
	}
	return dir
}

// fatalRecorder is a testing.TB whose Fatal records the message and ends the
// goroutine, as testing's does, so that a test can check what a helper reports.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// fatalOf runs fn with a fatalRecorder and returns what it failed with ("" when
// it did not).
func fatalOf(t *testing.T, fn func(tb testing.TB)) string {
	rec := &fatalRecorder{TB: t}
	var wg sync.WaitGroup
	wg.Go(func() { fn(rec) })
	wg.Wait()
	return rec.msg
}

// TestStart runs bundles on one server: inputs and params reach the handler, a
// failed run is returned (not a test failure), the roles' tokens are the
// server's, and an invalid bundle fails the test naming the problem.
func TestStart(t *testing.T) {
	t.Parallel()

	srv := cairntest.Start(t)
	require.True(t, strings.HasPrefix(srv.URL, "http://127.0.0.1:"), srv.URL)

	t.Run("run and output", func(t *testing.T) {
		t.Parallel()
		dir := writeBundle(t, `name: echo-params
steps:
  - {key: shout, exec: ["./bin/shout"], with: {suffix: "!"}}
  - {key: done, needs: [shout], builtin: echo}
`, map[string]string{"bin/shout": "#!/bin/sh\n# prints the envelope's input and params back\ncat\n"})
		res := srv.Deploy(t, dir)
		require.Equal(t, "echo-params", res.Workflow)
		require.EqualValues(t, 1, res.Version)

		run := srv.Run(t, "echo-params", map[string]any{"word": "hey"})
		require.Equal(t, client.RunStatusSucceeded, run.Status, "%v", run.Error)
		var env struct {
			Input  map[string]string `json:"input"`
			Params map[string]string `json:"params"`
		}
		srv.OutputJSON(t, run.Id, "shout", &env)
		require.Equal(t, "hey", env.Input["word"])
		require.Equal(t, "!", env.Params["suffix"])
	})

	t.Run("failed run", func(t *testing.T) {
		t.Parallel()
		srv.Deploy(t, writeBundle(t, "name: always-fails\nsteps:\n  - {key: boom, builtin: fail}\n", nil))
		run := srv.Run(t, "always-fails", nil)
		require.Equal(t, client.RunStatusFailed, run.Status)
	})

	t.Run("tokens", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		viewer := srv.NewClient(t, srv.Tokens.Viewer)
		_, err := viewer.UploadBundle(ctx, strings.NewReader("not a bundle"))
		require.Equal(t, 403, problemStatus(err), "a viewer may not deploy: %v", err)
		admin := srv.NewClient(t, srv.Tokens.Admin)
		resp, err := admin.ListSecretsWithResponse(ctx, nil)
		require.NoError(t, err)
		require.Equal(t, 200, resp.StatusCode())
		stranger := srv.NewClient(t, "not-a-token-of-this-server")
		_, err = stranger.ListWorkflowsWithResponse(ctx, nil)
		require.Equal(t, 401, problemStatus(err), "%v", err)
	})

	t.Run("invalid bundle", func(t *testing.T) {
		t.Parallel()
		dir := writeBundle(t, "name: broken\nsteps:\n  - {key: a, needs: [nowhere], builtin: noop}\n", nil)
		msg := fatalOf(t, func(tb testing.TB) { srv.Deploy(tb, dir) })
		require.Contains(t, msg, `needs unknown step "nowhere"`)
	})
}

// problemStatus is the HTTP status of a *client.Problem error, or 0.
func problemStatus(err error) int {
	var p *client.Problem
	if !errors.As(err, &p) {
		return 0
	}
	return int(p.Status)
}
