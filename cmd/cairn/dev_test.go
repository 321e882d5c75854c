package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/internal/testenv"
)

// TestMain removes the cairn binary that tests signal (testenv.CairnBinary) once
// they are over.
func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveCairnBinary()
	os.Exit(code)
}

// devProcess is a `cairn dev` subprocess.
type devProcess struct {
	cmd    *exec.Cmd
	stdout *syncBuffer
	stderr *syncBuffer
	creds  map[string]string
	exited chan struct{} // closed once the process has been waited for
	err    error         // its exit status, once exited is closed
}

// wait waits for the process to exit and returns its status.
func (p *devProcess) wait() error {
	<-p.exited
	return p.err
}

// withEnv adds env (KEY=value) to a command's environment, for startDev.
func withEnv(env ...string) func(*exec.Cmd) {
	return func(cmd *exec.Cmd) { cmd.Env = append(cmd.Env, env...) }
}

// startDev starts `cairn dev` in dir and waits until it is ready; it returns the
// process and how long readiness took. Each opt may change the command before it
// starts (its user, its environment: withEnv).
func startDev(t *testing.T, dir string, opts ...func(*exec.Cmd)) (*devProcess, time.Duration) {
	t.Helper()
	credPath := filepath.Join(dir, ".cairn", "credentials")
	_ = os.Remove(credPath)
	start := time.Now()
	cmd := exec.Command(testenv.CairnBinary(t), "dev", "--listen", "127.0.0.1:0")
	cmd.Dir = dir
	cmd.Env = os.Environ()
	stderr := &syncBuffer{}
	stdout := &syncBuffer{}
	cmd.Stderr = stderr
	cmd.Stdout = stdout
	for _, opt := range opts {
		opt(cmd)
	}
	require.NoError(t, cmd.Start())
	p := &devProcess{cmd: cmd, stdout: stdout, stderr: stderr, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("cairn dev stderr:\n%s", stderr.String())
		}
	})
	// Waiting for the credentials file (written once the server listens), then for
	// /readyz to answer 200; a process that exits meanwhile fails the test at once.
	deadline := time.After(60 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !p.ready(credPath) {
		select {
		case <-p.exited:
			t.Fatalf("cairn dev exited: %v\n%s", p.err, stderr.String())
		case <-deadline:
			t.Fatal("cairn dev was not ready within 60s")
		case <-tick.C:
		}
	}
	return p, time.Since(start)
}

// ready reports whether the credentials file at credPath names a server whose
// /readyz answers 200, and keeps the credentials.
func (p *devProcess) ready(credPath string) bool {
	creds, err := readCredentials(credPath)
	if err != nil || creds["CAIRN_SERVER"] == "" {
		return false
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(creds["CAIRN_SERVER"] + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	p.creds = creds
	return resp.StatusCode == http.StatusOK
}

// deployHello deploys examples/hello through the CLI against the dev server.
func (p *devProcess) deployHello(t *testing.T) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	getenv := func(k string) string { return p.creds[k] }
	err := run(context.Background(), []string{"deploy", "../../examples/hello"}, getenv, &stdout, &stderr)
	require.NoError(t, err, "%s", stderr.String())
	return stdout.String()
}

func (p *devProcess) workflows(t *testing.T) string {
	t.Helper()
	status, body := p.get(t, "/v1/workflows", p.creds["CAIRN_VIEWER_TOKEN"])
	require.Equal(t, http.StatusOK, status, body)
	return body
}

// get sends GET path with token and returns the status and body.
func (p *devProcess) get(t *testing.T, path, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, p.creds["CAIRN_SERVER"]+path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

// TestDevKeepsDataAcrossRestarts starts `cairn dev` in an empty folder, writes
// data, stops it with SIGINT (Ctrl-C), starts it again, then kills it with SIGKILL
// and starts it again: the data survives both.
func TestDevKeepsDataAcrossRestarts(t *testing.T) {
	t.Parallel()
	dir := newDevDir(t, os.Geteuid())

	first, took := startDev(t, dir)
	t.Logf("first start (initdb included): ready in %s", took)
	out := first.deployHello(t)
	require.Contains(t, out, "hello")
	// The key that encrypts secrets is made once and kept: secrets set before a
	// restart stay readable after it.
	secretKey, err := os.ReadFile(filepath.Join(dir, ".cairn", "secret-key"))
	require.NoError(t, err)

	require.NoError(t, first.cmd.Process.Signal(os.Interrupt))
	require.NoError(t, first.wait(), "Ctrl-C is a clean exit")
	require.Contains(t, first.stderr.String(), "PostgreSQL stopped")

	second, took := startDev(t, dir)
	t.Logf("restart after Ctrl-C: ready in %s", took)
	require.Contains(t, second.workflows(t), `"name":"hello"`)

	require.NoError(t, second.cmd.Process.Signal(syscall.SIGKILL))
	_ = second.wait()

	third, took := startDev(t, dir)
	t.Logf("restart after SIGKILL: ready in %s", took)
	require.Contains(t, third.workflows(t), `"name":"hello"`)
	kept, err := os.ReadFile(filepath.Join(dir, ".cairn", "secret-key"))
	require.NoError(t, err)
	require.Equal(t, secretKey, kept)
	require.NoError(t, third.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, third.wait())
}

// TestDevAddsConfiguredTokens: `cairn dev` with CAIRN_TOKENS (two named approvers)
// and CAIRN_TOKENS_FILE serves those tokens beside the ones it generates, so that
// approvals by two people can be tried locally; the actions of a named token are
// recorded under its name.
func TestDevAddsConfiguredTokens(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "cairn-dev-test-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { os.RemoveAll(dir) })
	const alice, bob, carol = "alice-token-0123456789", "bob-token-0123456789", "carol-token-0123456789"
	tokensFile := filepath.Join(dir, "tokens")
	require.NoError(t, os.WriteFile(tokensFile, []byte("viewer:carol:"+carol+"\n"), 0o600))

	p, _ := startDev(t, dir, withEnv("CAIRN_TOKENS=operator:alice:"+alice+",operator:bob:"+bob, "CAIRN_TOKENS_FILE="+tokensFile))
	for name, tok := range map[string]string{"alice": alice, "bob": bob, "carol": carol,
		"generated viewer": p.creds["CAIRN_VIEWER_TOKEN"], "generated operator": p.creds["CAIRN_OPERATOR_TOKEN"]} {
		status, body := p.get(t, "/v1/workflows", tok)
		require.Equal(t, http.StatusOK, status, "%s: %s", name, body)
	}
	status, _ := p.get(t, "/v1/workflows", "mallory-token-0123456789")
	require.Equal(t, http.StatusUnauthorized, status)

	// Their actions carry their names: alice pauses the workflow, its new run waits,
	// bob resumes the run; the events say who did what.
	p.deployHello(t)
	as := func(token string, args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		getenv := func(k string) string {
			if k == "CAIRN_TOKEN" {
				return token
			}
			return p.creds[k]
		}
		require.NoError(t, run(context.Background(), args, getenv, &stdout, &stderr), stderr.String())
		return strings.TrimSpace(stdout.String())
	}
	as(alice, "workflow", "pause", "hello")
	_, workflow := p.get(t, "/v1/workflows/hello", carol)
	require.Contains(t, workflow, `"paused_by":"alice"`)
	id := as(alice, "run", "start", "hello", "--input", `{"name":"x"}`)
	as(bob, "run", "resume", id)
	_, events := p.get(t, "/v1/runs/"+id+"/events", carol)
	require.Contains(t, events, `"actor":"bob"`)
	require.Contains(t, p.stdout.String(), "credentials:", "the generated tokens are still written")
}
