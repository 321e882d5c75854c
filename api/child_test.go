package api_test

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestChildWorkflowRefusedAtDeploy: a workflow step pinned to a version number that
// does not exist is refused at deploy, naming the step and the field; pinned to one
// that exists, to an alias, or to the version being deployed of its own workflow,
// it is taken.
func TestChildWorkflowRefusedAtDeploy(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	deploy := func(m string) (int, map[string]any) {
		return tb.upload(t, bytes.NewReader(archive(t, entry{name: "cairn.yaml", body: m})))
	}
	status, out := deploy("name: billing\nsteps:\n  - {key: a, builtin: noop}\n")
	require.Equal(t, http.StatusCreated, status, "%v", out)

	status, out = deploy("name: orders\nsteps:\n  - {key: a, builtin: noop}\n  - {key: bill, workflow: {name: billing, version: 2}}\n")
	require.Equal(t, http.StatusBadRequest, status, "%v", out)
	require.Equal(t, "invalid_bundle", out["code"])
	errs := out["errors"].([]any)
	require.Len(t, errs, 1)
	e := errs[0].(map[string]any)
	require.Equal(t, "cairn.yaml#steps[1].workflow.version", e["location"])
	require.Equal(t, `step "bill": workflow.version: runs workflow billing version 2, which does not exist`, e["message"])

	for _, m := range []string{
		"name: orders\nsteps:\n  - {key: bill, workflow: {name: billing, version: 1}}\n",
		"name: orders\nsteps:\n  - {key: bill, workflow: {name: billing, version: stable}}\n",
		"name: tree\nsteps:\n  - {key: self, workflow: {name: tree, version: 1}}\n",
	} {
		status, out = deploy(m)
		require.Equal(t, http.StatusCreated, status, "%s: %v", m, out)
	}
}
