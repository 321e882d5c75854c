package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/client"
)

// TestCLIApprove: a run of a required-2 approval waits (run get says so); alice's
// and bob's approvals through `cairn run approve` complete it, alice's second
// counts once, a viewer is refused; the run ends and the output names both.
func TestCLIApprove(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cairn.yaml"), []byte(
		"name: release\nsteps:\n  - {key: gate, approval: {required: 2}}\n  - {key: ship, needs: [gate], builtin: echo}\n"), 0o644))
	b.mustCLI(t, "deploy", dir)
	id := strings.TrimSpace(b.mustCLI(t, "run", "start", "release"))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		out, err := b.cli(t, "run", "get", id)
		require.NoError(c, err)
		assert.Regexp(c, `(?m)^gate +suspended .*approval 0/2`, out)
	}, 30*time.Second, 50*time.Millisecond)

	out := b.mustCLI(t, "run", "approve", id, "gate", "--token", b.alice, "--comment", "lgtm", "--input", `{"ticket":7}`)
	require.Equal(t, "step gate of run "+id+": approved; the step is waiting for approval: 1 of 2\n", out)
	out = b.mustCLI(t, "run", "approve", id, "gate", "--token", b.alice)
	require.Contains(t, out, "already approved by this token (an approver counts once); the step is waiting for approval: 1 of 2")
	_, err := b.cli(t, "run", "approve", id, "gate", "--token", b.viewer)
	require.Equal(t, "forbidden", client.ProblemCode(err), "%v", err)
	_, err = b.cli(t, "run", "approve", id, "gate", "--input", "{nope")
	require.ErrorContains(t, err, "not valid JSON")

	out = b.mustCLI(t, "run", "approve", id, "gate", "--token", b.bob)
	require.Equal(t, "step gate of run "+id+": approved; the step is succeeded\n", out)
	require.Contains(t, b.mustCLI(t, "run", "watch", id), "run.succeeded")
	gate := b.mustCLI(t, "run", "output", id, "gate")
	var approved struct {
		ApprovedBy []struct {
			Name  string         `json:"name"`
			Input map[string]any `json:"input"`
		} `json:"approved_by"`
	}
	require.NoError(t, json.Unmarshal([]byte(gate), &approved), gate)
	require.Len(t, approved.ApprovedBy, 2)
	require.Equal(t, "alice", approved.ApprovedBy[0].Name)
	require.EqualValues(t, 7, approved.ApprovedBy[0].Input["ticket"])
	require.Equal(t, "bob", approved.ApprovedBy[1].Name)

	_, err = b.cli(t, "run", "reject", id, "gate")
	require.Equal(t, "invalid_run_state", client.ProblemCode(err), "%v", err)
}

// TestCLIReject: one rejection fails the run; the step's error names who and why.
func TestCLIReject(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cairn.yaml"), []byte(
		"name: release\nsteps:\n  - {key: gate, approval: {}}\n"), 0o644))
	b.mustCLI(t, "deploy", dir)
	id := strings.TrimSpace(b.mustCLI(t, "run", "start", "release"))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		out, err := b.cli(t, "run", "get", id)
		require.NoError(c, err)
		assert.Regexp(c, `(?m)^gate +suspended`, out)
	}, 30*time.Second, 50*time.Millisecond)
	out := b.mustCLI(t, "run", "reject", id, "gate", "--token", b.bob, "--comment", "freeze week")
	require.Equal(t, "step gate of run "+id+": rejected; the step is failed\n", out)
	out, _ = b.cli(t, "run", "get", id)
	require.Contains(t, out, "rejected by bob: freeze week")
}
