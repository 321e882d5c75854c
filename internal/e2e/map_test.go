package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/client"
)

// TestMapSurvivesKill: a map over 2,000 items of a $blob (an output over the inline
// limit) on two servers; the server working on it is SIGKILLed a third of the way
// through the expansion; the other finishes it: every item has exactly one instance
// that succeeded once, the output lists them in order, and no more than
// max_parallel instances were ever unfinished at once.
func TestMapSurvivesKill(t *testing.T) {
	t.Parallel()
	const items, parallel = 2000, 50
	st := newStack(t, stackOptions{})
	servers := []*server{st.start(serverOptions{name: "a", inlineLimit: 1024}), st.start(serverOptions{name: "b", inlineLimit: 1024})}
	api := servers[0].api()
	var nums []string
	for i := range items {
		nums = append(nums, fmt.Sprint(i))
	}
	api.deploy(map[string]string{"cairn.yaml": `name: mapkill
steps:
  - {key: split, builtin: echo, with: {value: [` + strings.Join(nums, ",") + `]}}
  - key: each
    needs: [split]
    map: {over: "deps.split", max_parallel: ` + fmt.Sprint(parallel) + `}
    builtin: echo
    retry: {max_attempts: 3, backoff: fixed, delay: 100ms}
  - {key: join, needs: [each], builtin: noop}
`})
	id := api.startRun("mapkill", 0, map[string]any{})
	// Kill one server a third of the way through the expansion.
	each := api.waitStep(id, "each", 60*time.Second, "a third of the instances created", func(s client.Step) bool {
		return s.Map != nil && s.Map.Created >= items/3
	})
	require.LessOrEqual(t, each.Map.Created-each.Map.Succeeded-each.Map.Failed, int64(parallel))
	servers[0].kill()
	t.Logf("killed %s with %d instances created", servers[0].name, each.Map.Created)

	api = servers[1].api()
	run := api.waitRun(id, 3*time.Minute)
	require.Equal(t, client.RunStatusSucceeded, run.Status, "%v", run.Error)
	each = api.mustStep(id, "each")
	require.NotNil(t, each.Map.Total)
	require.EqualValues(t, items, *each.Map.Total)
	require.EqualValues(t, items, each.Map.Succeeded)

	// Every item once, in order, each instance succeeded by exactly one attempt.
	uid := api.runID(id)
	seen := 0
	after := int64(-1)
	for {
		ctx, cancel := withTimeout(10 * time.Second)
		limit := int64(1000)
		resp, err := api.cl.ListItemsWithResponse(ctx, uid, "each", &client.ListItemsParams{After: &after, Limit: &limit})
		cancel()
		require.NoError(t, err)
		require.NotNil(t, resp.JSON200, "%s", resp.Body)
		for _, it := range deref(resp.JSON200.Items) {
			require.EqualValues(t, seen, it.Index)
			require.Equal(t, client.ItemStatusSucceeded, it.Status)
			require.JSONEq(t, fmt.Sprint(seen), string(jsonOf(it.Output)))
			seen++
		}
		if resp.JSON200.NextAfter == nil {
			break
		}
		after = *resp.JSON200.NextAfter
	}
	require.Equal(t, items, seen)
	out := api.output(id, "each")
	require.JSONEq(t, "["+strings.Join(nums, ",")+"]", string(out))
}

// TestMapDefaultRetrySurvivesKill: a map of 400 exec items with the default retry
// policy (max_attempts 1) on one server, SIGKILLed while items run, then started
// again on the same catalog and blob store: the interrupted items run again
// (their interruption counts against nothing), and the run succeeds with 400
// outputs in order, each item succeeded by exactly one attempt.
func TestMapDefaultRetrySurvivesKill(t *testing.T) {
	t.Parallel()
	const items = 400
	st := newStack(t, stackOptions{})
	srv := st.start(serverOptions{name: "a"})
	api := srv.api()
	var nums []string
	for i := range items {
		nums = append(nums, fmt.Sprint(i))
	}
	api.deploy(map[string]string{"cairn.yaml": `name: mapcrash
steps:
  - {key: split, builtin: echo, with: {value: [` + strings.Join(nums, ",") + `]}}
  - key: each
    needs: [split]
    map: {over: "deps.split", max_parallel: 40}
    exec: ["./bin/item"]
  - {key: join, needs: [each], builtin: noop}
`, "bin/item": "#!/bin/bash\n# The envelope's index is the item (0..399); a little work.\nsleep 0.1\nsed -n 's/.*\"index\": *\\([0-9]*\\).*/\\1/p' | head -1\n"})
	id := api.startRun("mapcrash", 0, map[string]any{})
	each := api.waitStep(id, "each", 2*time.Minute, "a third of the items done", func(s client.Step) bool {
		return s.Map != nil && s.Map.Succeeded >= items/3
	})
	srv.kill()
	t.Logf("killed %s with %d items succeeded", srv.name, each.Map.Succeeded)

	srv = st.start(serverOptions{name: "b"})
	api = srv.api()
	run := api.waitRun(id, 3*time.Minute)
	require.Equal(t, client.RunStatusSucceeded, run.Status, "%v", run.Error)
	require.JSONEq(t, "["+strings.Join(nums, ",")+"]", string(api.output(id, "each")))
	interrupted := 0
	for i := range items {
		succeeded := 0
		for _, a := range api.mustAttempts(id, fmt.Sprintf("each[%d]", i)) {
			switch a.Status {
			case "succeeded":
				succeeded++
			case "interrupted":
				interrupted++
				require.False(t, a.Counted)
			default:
				t.Fatalf("item %d: attempt %d %s: %v", i, a.Number, a.Status, jsonOf(a.Error))
			}
		}
		require.Equal(t, 1, succeeded, "item %d", i)
	}
	t.Logf("%d attempts interrupted by the kill, all run again", interrupted)
	require.Positive(t, interrupted, "the kill interrupted running items")
}
