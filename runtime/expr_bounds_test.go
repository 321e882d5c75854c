package runtime_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/expr"
	"github.com/cairnrun/cairn/runtime"
)

// TestExpressionValuesBounded: a child run's input and a
// map's items built by an expression are bounded by expr.MaxValue, the API's input
// limit. `L.map(a, L.map(b, input.s))` over a 100 KB string used to start a child
// with a 10 MB input; now the step fails with code expression, naming the limit,
// and no child run is created. An input under the limit still starts its child.
func TestExpressionValuesBounded(t *testing.T) {
	t.Parallel()
	_, tb := setup(t)
	startDispatcher(t, tb, runtime.Config{Concurrency: 2})
	deploy(t, tb, map[string]string{"cairn.yaml": `
name: probe
steps:
  - {key: echo, builtin: echo}
`})
	const L = "[0,1,2,3,4,5,6,7,8,9]"
	parent := deploy(t, tb, map[string]string{"cairn.yaml": `
name: amplify
defaults: {retry: {max_attempts: 1}}
steps:
  - {key: child, workflow: {name: probe, input: "` + L + `.map(a, ` + L + `.map(b, input.s))"}}
  - {key: fan, map: {over: "` + L + `.map(a, ` + L + `.map(b, input.s))"}, builtin: echo}
  - {key: small, workflow: {name: probe, input: "` + L + `.map(a, input.s)"}}
`})
	in, err := json.Marshal(map[string]string{"s": strings.Repeat("A", 100_000)})
	require.NoError(t, err)
	id := startRun(t, tb, parent, string(in))
	require.Equal(t, catalog.RunFailed, waitRun(t, tb, id, 30*time.Second).Status)
	steps := stepMap(t, tb, id)
	for _, key := range []string{"child", "fan"} {
		e := stepError(t, tb, id, key)
		require.Equal(t, expr.Code, e["code"], key)
		require.Contains(t, e["message"], "more than "+strconv.Itoa(expr.MaxValue)+" bytes", key)
		require.Nil(t, steps[key].ChildRun, key)
	}
	require.NotNil(t, steps["small"].ChildRun, "a 1 MB input, under the limit, starts its child")
	child, err := tb.store.RunGet(t.Context(), *steps["small"].ChildRun)
	require.NoError(t, err)
	require.Greater(t, len(child.Input), 1_000_000)
}
