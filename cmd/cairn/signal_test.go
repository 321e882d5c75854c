package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/client"
)

// TestCLISignal: `cairn run get` shows what a step waits for; `cairn run signal`
// delivers JSON and files; a repeat with the same key and payload is applied once,
// the key with another payload refused.
func TestCLISignal(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cairn.yaml"), []byte(`name: orders
steps:
  - {key: paid, signal: {name: paid, timeout: 72h}}
  - {key: doc, needs: [paid], signal: {name: doc}}
  - {key: ship, needs: [doc], builtin: echo}
`), 0o644))
	b.mustCLI(t, "deploy", dir)
	id := strings.TrimSpace(b.mustCLI(t, "run", "start", "orders"))
	require.Eventually(t, func() bool {
		out, err := b.cli(t, "run", "get", id)
		return err == nil && strings.Contains(out, "suspended")
	}, 20*time.Second, 20*time.Millisecond)
	out := b.mustCLI(t, "run", "get", id)
	require.Contains(t, out, "WAITING FOR")
	require.Regexp(t, `(?m)^paid +suspended +1/1 .*signal paid, timeout in 7[12]h`, out)
	require.Regexp(t, `(?m)^doc +waiting .*upstream paid`, out)

	_, err := b.cli(t, "run", "signal", id, "nope")
	require.Equal(t, "not_found", client.ProblemCode(err), "%v", err)
	require.Regexp(t, `^signal paid #\d+ completed step paid\n$`, b.mustCLI(t, "run", "signal", id, "paid", "--data", `{"amount": 5}`, "--idempotency-key", "p1"))
	require.Regexp(t, `^signal paid #\d+ sent before`, b.mustCLI(t, "run", "signal", id, "paid", "--data", `{"amount": 5}`, "--idempotency-key", "p1"))
	_, err = b.cli(t, "run", "signal", id, "paid", "--data", `{"amount": 6}`, "--idempotency-key", "p1")
	require.Equal(t, "idempotency_key_reused", client.ProblemCode(err), "the key with another payload: %v", err)

	file := filepath.Join(t.TempDir(), "invoice.pdf")
	require.NoError(t, os.WriteFile(file, []byte("%PDF-1.4 not really"), 0o644))
	b.mustCLI(t, "run", "signal", id, "doc", "--data", "@"+file)
	require.Contains(t, b.mustCLI(t, "run", "watch", id), "run.succeeded")
	require.Equal(t, "%PDF-1.4 not really", b.mustCLI(t, "run", "output", id, "doc"))
	require.JSONEq(t, `{"amount": 5}`, b.mustCLI(t, "run", "output", id, "paid"))

	_, err = b.cli(t, "run", "signal", id, "paid", "--data", `1`)
	require.Equal(t, "run_finished", client.ProblemCode(err), "%v", err)
	_, err = b.cli(t, "run", "signal", id, "paid", "--data", `{bad`)
	require.ErrorContains(t, err, "not valid JSON")
}
