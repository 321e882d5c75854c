package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/client"
)

// cli runs the real cairn binary as a user would, against server s with the
// operator's token, and returns its stdout; a failing command fails the test with
// its stderr.
func (s *server) cli(args ...string) string {
	s.t.Helper()
	ctx, cancel := withTimeout(time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cairnBinary(s.t), args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + s.t.TempDir(), "CAIRN_SERVER=" + s.url, "CAIRN_TOKEN=" + operatorToken}
	cmd.Dir = s.t.TempDir()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(s.t, cmd.Run(), "cairn %s\nstderr: %s", strings.Join(args, " "), stderr.String())
	return stdout.String()
}

// TestRollbackAfterBadDeploy is aliases (docs/operations.md), through the real
// binary: deploy v1 and start runs; deploy a bad v2 and start a run of it; `cairn
// rollback`: new runs start on v1 and succeed, while the run started on v2 stays on
// v2.
func TestRollbackAfterBadDeploy(t *testing.T) {
	t.Parallel()
	st := newStack(t, stackOptions{})
	s := st.start(serverOptions{})
	c := s.api()

	good := writeTree(t, map[string]string{"cairn.yaml": `name: orders
steps:
  - {key: reserve, builtin: noop}
  - {key: charge, needs: [reserve], builtin: noop}
`})
	// The bad version fails its charge, and retries it long after the test ends:
	// its runs stay running.
	bad := writeTree(t, map[string]string{"cairn.yaml": `name: orders
steps:
  - {key: reserve, builtin: noop}
  - {key: charge, needs: [reserve], builtin: fail, retry: {max_attempts: 5, backoff: fixed, delay: 1h}}
`})

	require.Contains(t, s.cli("deploy", good), "version:  1")
	before := []string{c.startRun("orders", 0, nil), c.startRun("orders", 0, nil)}
	for _, id := range before {
		run := c.waitRun(id, time.Minute)
		require.Equal(t, client.RunStatusSucceeded, run.Status)
		require.EqualValues(t, 1, run.Version)
	}

	require.Contains(t, s.cli("deploy", bad), "version:  2")
	onBad := c.startRun("orders", 0, nil)
	c.waitStep(onBad, "charge", time.Minute, "its first attempt failed", func(step client.Step) bool { return step.Attempts == 1 && step.Status == client.StepStatusReady })

	require.Equal(t, "orders latest -> version 1 (was 2)\n", s.cli("rollback", "orders"))
	require.Regexp(t, `(?m)^latest +1 `, s.cli("workflows", "aliases", "orders"))

	after := c.startRun("orders", 0, nil)
	run := c.waitRun(after, time.Minute)
	require.Equal(t, client.RunStatusSucceeded, run.Status)
	require.EqualValues(t, 1, run.Version, "a new run starts on the version latest was rolled back to")
	// The CLI's run start without --version is the same.
	cliRun := strings.TrimSpace(s.cli("run", "start", "orders", "--wait"))
	require.Contains(t, cliRun, "version 1")

	stayed, err := c.run(onBad)
	require.NoError(t, err)
	require.EqualValues(t, 2, stayed.Version, "a run started before the rollback stays on its version")
	require.Equal(t, client.RunStatusRunning, stayed.Status)
}
