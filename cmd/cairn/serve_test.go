package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/internal/testenv"
)

// startServe runs `cairn serve` with env added to the environment and waits for
// /readyz; it returns the base URL.
func startServe(t *testing.T, env ...string) string {
	t.Helper()
	return startServeAt(t, freeAddr(t), env...)
}

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

// startServeAt is startServe listening on addr.
func startServeAt(t *testing.T, addr string, env ...string) string {
	t.Helper()
	cmd := exec.Command(testenv.CairnBinary(t), "serve")
	cmd.Env = append(append(os.Environ(), "CAIRN_LISTEN="+addr, "CAIRN_CACHE_DIR="+t.TempDir()), env...)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("serve %s stderr (tail):\n%s", addr, tail(stderr.String(), 4000))
		}
	})
	// Waiting for the server to be ready.
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 50*time.Millisecond)
	return "http://" + addr
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func apiDo(t *testing.T, method, url string, body io.Reader, contentType string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+operatorTokenForTest)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b
}

// TestTwoServersRunEveryStepExactlyOnce runs 1,000 runs of a 5-step DAG on two
// `cairn serve` processes sharing one database: every step of every run has exactly
// one successful attempt, and no run is stuck.
func TestTwoServersRunEveryStepExactlyOnce(t *testing.T) {
	t.Parallel()
	const runs = 1000
	url := testenv.DatabaseURL(t)
	env := []string{
		"CAIRN_DATABASE_URL=" + url,
		"CAIRN_BLOBSTORE=file://" + t.TempDir(),
		"CAIRN_TOKENS=operator:" + operatorTokenForTest,
		"CAIRN_SIGNING_KEY=signing-key-for-tests-0123456789abcdef",
	}
	a := startServe(t, env...)
	b := startServe(t, env...)

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(dir+"/cairn.yaml", []byte(`name: five
steps:
  - {key: a, builtin: noop}
  - {key: b, needs: [a], builtin: echo}
  - {key: c, needs: [a], builtin: noop}
  - {key: d, needs: [b, c], builtin: noop}
  - {key: e, needs: [d], builtin: echo, with: {value: done}}
`), 0o644))
	var archive bytes.Buffer
	_, err := bundle.Pack(context.Background(), dir, &archive)
	require.NoError(t, err)
	status, body := apiDo(t, http.MethodPost, a+"/v1/bundles", &archive, "application/gzip")
	require.Equal(t, http.StatusCreated, status, "%s", body)

	start := time.Now()
	for i := 0; i < runs; i++ {
		server := a
		if i%2 == 1 {
			server = b
		}
		status, body := apiDo(t, http.MethodPost, server+"/v1/workflows/five/runs", bytes.NewReader([]byte(fmt.Sprintf(`{"input": %d}`, i))), "application/json")
		require.Equal(t, http.StatusAccepted, status, "%s", body)
	}
	db, err := sql.Open("postgres", url)
	require.NoError(t, err)
	defer db.Close()
	// Waiting for every run to end.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var open int
		require.NoError(c, db.QueryRow(`SELECT count(*) FROM runs WHERE status IN ('pending', 'running')`).Scan(&open))
		assert.Zero(c, open, "runs pending or running")
	}, 3*time.Minute, 200*time.Millisecond, "runs still open")
	t.Logf("%d runs of 5 steps in %s", runs, time.Since(start).Round(time.Millisecond))

	var succeededRuns, okAttempts, stepsWithoutOne, dispatchers int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM runs WHERE status = 'succeeded'`).Scan(&succeededRuns))
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM attempts WHERE status = 'succeeded'`).Scan(&okAttempts))
	require.NoError(t, db.QueryRow(`
SELECT count(*) FROM steps s
WHERE (SELECT count(*) FROM attempts a WHERE a.run_id = s.run_id AND a.step_key = s.key AND a.status = 'succeeded') <> 1`).Scan(&stepsWithoutOne))
	require.NoError(t, db.QueryRow(`SELECT count(DISTINCT dispatcher) FROM attempts`).Scan(&dispatchers))
	require.Equal(t, runs, succeededRuns)
	require.Equal(t, runs*5, okAttempts)
	require.Zero(t, stepsWithoutOne, "steps without exactly one successful attempt")
	require.Equal(t, 2, dispatchers, "both servers ran steps")

	// The outputs flowed through the DAG.
	var out json.RawMessage
	require.NoError(t, db.QueryRow(`SELECT output FROM steps WHERE key = 'e' LIMIT 1`).Scan(&out))
	require.JSONEq(t, `"done"`, string(out))
}
