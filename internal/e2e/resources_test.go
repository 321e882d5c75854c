package e2e

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/client"
)

// TestResourcesMemory is resources.memory (docs/functions.md) through a real
// `cairn serve`: an exec step with resources.memory whose handler allocates past it
// fails with code resource_exhausted, at once (terminal, whatever its retry
// policy), and a step under the same limit succeeds; packing a bundle with
// resources on a builtin step is refused naming the field.
func TestResourcesMemory(t *testing.T) {
	t.Parallel()
	st := newStack(t, stackOptions{})
	s := st.start(serverOptions{})
	c := s.api()
	c.deploy(map[string]string{
		"cairn.yaml": `name: hungry
steps:
  - key: small
    exec: ["./bin/alloc", "8"]
    resources: {memory: 96Mi, pids: 256}
  - key: big
    needs: [small]
    exec: ["./bin/alloc", "512"]
    resources: {memory: 96Mi}
    retry: {max_attempts: 3, delay: 10ms}
`,
		"bin/alloc": `#!/bin/sh
exec perl -e '$x = "a" x ($ARGV[0] * 1024 * 1024); print "{\"mib\": $ARGV[0]}"' "$1"
`,
	})
	id := c.startRun("hungry", 0, nil)
	require.Equal(t, client.RunStatus("failed"), c.waitRun(id, time.Minute).Status)
	require.JSONEq(t, `{"mib": 8}`, string(c.output(id, "small")))
	as := c.mustAttempts(id, "big")
	require.Len(t, as, 1, "resource_exhausted is terminal")
	e := errorOf(as[0].Error)
	require.Equal(t, "resource_exhausted", e.Code, e.Message)
	require.Contains(t, e.Message, "resources.memory")

	dir := writeTree(t, map[string]string{"cairn.yaml": "name: bad\nsteps:\n  - {key: a, builtin: noop, resources: {memory: 1Gi}}\n"})
	var buf bytes.Buffer
	_, err := bundle.Pack(context.Background(), dir, &buf) // the server runs the same checks (400)
	require.Error(t, err)
	require.Contains(t, err.Error(), `step "a": resources: resources apply to exec steps only`)
}
