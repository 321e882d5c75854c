package runtime_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/runtime"
)

// TestMapRuns: a map over an inline list and one over a $blob (an upstream output
// over the inline limit) run one instance per item with item and index, and give
// the list of outputs in item order; the next step sees it.
func TestMapRuns(t *testing.T) {
	t.Parallel()
	_, tb := setup(t)
	startDispatcher(t, tb, runtime.Config{Limits: runtime.Limits{InlineLimit: 256}})
	var nums []string
	for i := range 60 {
		nums = append(nums, fmt.Sprint(i*100000))
	}
	v := deploy(t, tb, map[string]string{"cairn.yaml": `
name: mapper
steps:
  - {key: split, builtin: echo, with: {value: [` + strings.Join(nums, ", ") + `]}}
  - {key: small, map: {over: "['a', 'b', 'c']", max_parallel: 2}, builtin: echo}
  - {key: big, needs: [split], map: {over: "deps.split", max_parallel: 7}, builtin: echo}
  - {key: child, map: {over: "[1, 2]"}, workflow: {name: kid, input: "{'item': item, 'index': index}"}}
  - {key: none, map: {over: "[]"}, builtin: echo}
  - {key: join, needs: [small, big, none], builtin: noop}
`})
	deploy(t, tb, map[string]string{"cairn.yaml": `
name: kid
steps:
  - {key: echo, builtin: echo}
`})
	id := startRun(t, tb, v, "")
	run := waitRun(t, tb, id, 60*time.Second)
	require.Equal(t, catalog.RunSucceeded, run.Status, "%s", run.Error)
	steps := stepMap(t, tb, id)
	require.NotContains(t, steps, "small[0]")
	require.JSONEq(t, `["a","b","c"]`, string(steps["small"].Output))
	require.JSONEq(t, `[]`, string(steps["none"].Output), "no items: an empty list")
	require.JSONEq(t, `[{"echo":{"item":1,"index":0}},{"echo":{"item":2,"index":1}}]`, string(steps["child"].Output))

	_, isBlob := blobstore.ParseRef(json.RawMessage(steps["split"].Output))
	require.True(t, isBlob, "big maps over a $blob")
	// big's list is over the inline limit: a blob, the items in order.
	ref, ok := blobstore.ParseRef(json.RawMessage(steps["big"].Output))
	require.True(t, ok, "a $blob: %s", steps["big"].Output)
	key, err := ref.Key()
	require.NoError(t, err)
	rc, _, err := tb.blobs.Get(t.Context(), key, blobstore.GetOptions{})
	require.NoError(t, err)
	defer rc.Close()
	var got []int
	require.NoError(t, json.NewDecoder(rc).Decode(&got))
	require.Len(t, got, 60)
	for i, n := range got {
		require.Equal(t, i*100000, n)
	}
	items, err := tb.store.MapItemList(t.Context(), &catalog.MapItemListParams{RunID: id, Key: "big", After: -1, Limit: 100})
	require.NoError(t, err)
	require.Len(t, items, 60)
	for _, it := range items {
		require.Len(t, attempts(t, tb, id, it.Key), 1)
	}
}

// TestMapTolerance: failures within tolerate_failures let the map succeed (null in
// their place, listed on the step); past it the map fails with code map_failed.
func TestMapTolerance(t *testing.T) {
	t.Parallel()
	_, tb := setup(t)
	startDispatcher(t, tb, runtime.Config{})
	v := deploy(t, tb, map[string]string{"cairn.yaml": `
name: tolerant
steps:
  - {key: ok, map: {over: "[1, 2, 3, 4]", tolerate_failures: "50%"}, builtin: fail, with: {times: 1, retryable: false}}
`})
	deploy(t, tb, map[string]string{"cairn.yaml": `
name: strict
steps:
  - {key: no, map: {over: "[1, 2, 3]", max_parallel: 1, tolerate_failures: 0}, builtin: fail, with: {times: 1, retryable: false}}
`})
	id := startRun(t, tb, v, "")
	run := waitRun(t, tb, id, 30*time.Second)
	require.Equal(t, catalog.RunFailed, run.Status, "every instance fails its first attempt: 4 of 4, over 50%%")
	e := stepError(t, tb, id, "ok")
	require.Equal(t, runtime.CodeMapFailed, e["code"])
	require.EqualValues(t, 4, e["failed"])
	require.Len(t, e["failures"], 4)

	strict, err := tb.store.VersionGet(t.Context(), "strict", 1)
	require.NoError(t, err)
	id = startRun(t, tb, strict, "")
	require.Equal(t, catalog.RunFailed, waitRun(t, tb, id, 30*time.Second).Status)
	e = stepError(t, tb, id, "no")
	require.Contains(t, e["message"], "the map stopped after 1 items")
}
