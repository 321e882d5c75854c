package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/internal/testenv"
)

// idleClosedWithin sends one request on a new connection to addr, reads the answer,
// then waits up to max for the server to close the idle connection. It returns how
// long the connection stayed idle, and whether it was closed.
func idleClosedWithin(t *testing.T, addr string, max time.Duration) (time.Duration, bool) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	idle := time.Now()
	require.NoError(t, conn.SetReadDeadline(idle.Add(max)))
	_, err = br.ReadByte()
	var ne net.Error
	return time.Since(idle), !(errors.As(err, &ne) && ne.Timeout())
}

// TestHTTPServerClosesIdleConnections: the API's http.Server closes a
// keep-alive connection left idle for IdleTimeout.
func TestHTTPServerClosesIdleConnections(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := newHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}), limitFlags{idleTimeout: 200 * time.Millisecond}, slog.New(slog.DiscardHandler))
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	idle, closed := idleClosedWithin(t, ln.Addr().String(), 5*time.Second)
	require.True(t, closed, "the idle connection was still open after %s", idle)
	require.Less(t, idle, 2*time.Second)
	require.Equal(t, defaultIdleTimeout, newHTTPServer(nil, limitFlags{}, slog.New(slog.DiscardHandler)).IdleTimeout)
}

// manyStepsDir writes a bundle folder of n no-op steps.
func manyStepsDir(t *testing.T, name string, n int) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\nsteps:\n", name)
	for i := range n {
		fmt.Fprintf(&b, "  - {key: s%d, builtin: noop}\n", i)
	}
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cairn.yaml"), []byte(b.String()), 0o644))
	return dir
}

// TestServeLimits: `cairn serve` takes the limits from its environment: idle
// connections closed after CAIRN_IDLE_TIMEOUT, /metrics behind CAIRN_METRICS_TOKEN,
// deploys capped at CAIRN_MAX_STEPS (raised past the default, which the CLI then does
// not enforce on its own).
func TestServeLimits(t *testing.T) {
	t.Parallel()
	const metricsTok = "metrics-token-for-tests-0123456789"
	base := startServe(t,
		"CAIRN_DATABASE_URL="+testenv.DatabaseURL(t),
		"CAIRN_BLOBSTORE=file://"+t.TempDir(),
		"CAIRN_TOKENS=operator:"+operatorTokenForTest,
		"CAIRN_IDLE_TIMEOUT=300ms",
		"CAIRN_METRICS_TOKEN="+metricsTok,
		fmt.Sprintf("CAIRN_MAX_STEPS=%d", bundle.DefaultMaxSteps+1000),
	)

	t.Run("idle timeout", func(t *testing.T) {
		idle, closed := idleClosedWithin(t, strings.TrimPrefix(base, "http://"), 5*time.Second)
		require.True(t, closed, "the idle connection was still open after %s", idle)
		require.Less(t, idle, 2*time.Second)
	})

	t.Run("metrics token", func(t *testing.T) {
		for token, want := range map[string]int{"": http.StatusUnauthorized, operatorTokenForTest: http.StatusUnauthorized, metricsTok: http.StatusOK} {
			req, err := http.NewRequest(http.MethodGet, base+"/metrics", nil)
			require.NoError(t, err)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, want, resp.StatusCode, "token %q", token)
		}
	})

	t.Run("max steps", func(t *testing.T) {
		over := bundle.DefaultMaxSteps + 1001
		dir := manyStepsDir(t, "over", over)
		// bundle.Pack would refuse it (it checks the default limits): the archive
		// is written by hand.
		var archive bytes.Buffer
		tree, err := bundle.Scan(context.Background(), dir, bundle.Limits{})
		require.NoError(t, err)
		require.NoError(t, bundle.WriteCanonical(context.Background(), dir, tree, &archive))
		status, body := apiDo(t, http.MethodPost, base+"/v1/bundles", &archive, "application/gzip")
		require.Equal(t, http.StatusBadRequest, status, "%s", body)
		require.Contains(t, string(body), fmt.Sprintf("%d steps, over the limit of %d steps per workflow", over, bundle.DefaultMaxSteps+1000))

		// Over the default but under the server's limit: the CLI leaves the
		// decision to the server, which accepts it.
		var stdout, stderr bytes.Buffer
		vars := map[string]string{"CAIRN_SERVER": base, "CAIRN_TOKEN": operatorTokenForTest}
		err = run(context.Background(), []string{"deploy", manyStepsDir(t, "under", bundle.DefaultMaxSteps+1)}, func(k string) string { return vars[k] }, &stdout, &stderr)
		require.NoError(t, err, "%s", stderr.String())
		require.Contains(t, stdout.String(), "status:   created")
	})
}

// TestDevBannerHidesTokens: `cairn dev` prints where the credentials are
// and how to load them, not the tokens themselves (stdout ends up in logs), but for
// the operator token in the UI's one-click login link.
func TestDevBannerHidesTokens(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "cairn-dev-banner-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755)) // reachable by PostgreSQL's account (see TestDevKeepsDataAcrossRestarts)
	t.Cleanup(func() { os.RemoveAll(dir) })
	p, _ := startDev(t, dir)
	credPath := filepath.Join(dir, ".cairn", "credentials")
	// Waiting for the banner: it follows the credentials file.
	require.Eventually(t, func() bool { return strings.Contains(p.stdout.String(), "in a shell:") }, 10*time.Second, 20*time.Millisecond)
	banner := p.stdout.String()
	require.Contains(t, banner, "ready at "+p.creds["CAIRN_SERVER"])
	require.Contains(t, banner, "credentials: "+credPath)
	require.Contains(t, banner, ". "+credPath+"; set +a")
	// The one exception (docs/ui.md): the UI's one-click login link carries the
	// operator token in its fragment, once, and nowhere else.
	link := p.creds["CAIRN_SERVER"] + "/ui/login#token=" + p.creds["CAIRN_OPERATOR_TOKEN"]
	require.Equal(t, 1, strings.Count(banner, link), "the one-click login link")
	banner = strings.Replace(banner, link, "", 1)
	for _, k := range []string{"CAIRN_VIEWER_TOKEN", "CAIRN_OPERATOR_TOKEN", "CAIRN_ADMIN_TOKEN", "CAIRN_TOKEN"} {
		require.NotEmpty(t, p.creds[k], k)
		require.NotContains(t, banner, p.creds[k], "%s printed", k)
	}
}
