package catalog_test

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/catalog/catalogtest"
)

// TestRunListLeavesOutLargeInputs: a page of runs carries the inputs up to
// MaxInput bytes of JSON text and leaves out larger ones, however well they compress.
func TestRunListLeavesOutLargeInputs(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	v := catalogtest.Version(t, s, "wf", catalog.NewStep{Key: "a", MaxAttempts: 1})
	random := func(n int) string { // JSON text of n bytes that does not compress
		b := make([]byte, (n-2)/2)
		_, _ = rand.Read(b)
		return `"` + hex.EncodeToString(b) + `"`
	}
	inputs := []struct {
		json    string
		omitted bool
	}{
		{json: ``},
		{json: `1`},
		{json: `"` + strings.Repeat("b", 4094) + `"`},                        // 4096 bytes
		{json: `"` + strings.Repeat("b", 4095) + `"`, omitted: true},         // 4097 bytes, stored in a few
		{json: `{"x": "` + strings.Repeat("a", 1<<20) + `"}`, omitted: true}, // stored in about 12 KB
		{json: random(3000)},
		{json: random(5000), omitted: true},
	}
	want := map[uuid.UUID]int{}
	for i, in := range inputs {
		run, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "wf", Version: v.Version, Input: json.RawMessage(in.json)})
		require.NoError(t, err)
		want[run.ID] = i
	}
	runs, err := s.RunList(ctx, &catalog.RunListParams{Limit: 10, MaxInput: 4096})
	require.NoError(t, err)
	require.Len(t, runs, len(inputs))
	for _, r := range runs {
		in := inputs[want[r.ID]]
		switch {
		case in.json == "":
			require.Nil(t, r.Input)
			require.False(t, r.InputOmitted)
		case in.omitted:
			require.Nil(t, r.Input, "%.40s", in.json)
			require.True(t, r.InputOmitted, "%.40s", in.json)
		default:
			require.JSONEq(t, in.json, string(r.Input))
			require.False(t, r.InputOmitted, "%.40s", in.json)
		}
	}
	// MaxInput 0 leaves every input out.
	runs, err = s.RunList(ctx, &catalog.RunListParams{Limit: 10})
	require.NoError(t, err)
	for _, r := range runs {
		require.Nil(t, r.Input)
		require.Equal(t, inputs[want[r.ID]].json != "", r.InputOmitted)
	}
	// RunGet has the whole input.
	for id, i := range want {
		r, err := s.RunGet(ctx, id)
		require.NoError(t, err)
		if inputs[i].json != "" {
			require.JSONEq(t, inputs[i].json, string(r.Input))
		}
	}
}
