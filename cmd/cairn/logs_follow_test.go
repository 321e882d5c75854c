package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRunLogsFollow: `cairn run logs --follow`, started with the run, waits for
// the step's first attempt, prints its log as the handler writes it, and returns
// when the attempt ends, having printed exactly the stored log.
func TestRunLogsFollow(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cairn.yaml"), []byte("name: chatty\nsteps:\n  - {key: talk, exec: [./talk]}\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "talk"), []byte(
		"#!/bin/sh\ncat >/dev/null\ni=1\nwhile [ $i -le 8 ]; do echo \"line $i\" >&2; sleep 0.25; i=$((i+1)); done\necho '{}'\n"), 0o755))
	b.mustCLI(t, "deploy", dir)
	id := strings.TrimSpace(b.mustCLI(t, "run", "start", "chatty"))

	followed := b.mustCLI(t, "run", "logs", "--follow", id, "talk")
	require.Contains(t, followed, "line 1\n")
	require.Contains(t, followed, "line 8\n")
	require.Equal(t, b.mustCLI(t, "run", "logs", id, "talk"), followed)
}
