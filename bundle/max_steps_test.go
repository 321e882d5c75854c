package bundle

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// manyStepsManifest is a manifest of n no-op steps.
func manyStepsManifest(n int) string {
	var b strings.Builder
	b.WriteString("name: many\nsteps:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - {key: s%d, builtin: noop}\n", i)
	}
	return b.String()
}

// TestLoadMaxSteps: a manifest over MaxSteps is an invalid bundle (not a too-large
// one: a 400, not a 413) whose message names the count and the limit; the default
// is DefaultMaxSteps; a raised limit admits it.
func TestLoadMaxSteps(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		steps   int
		lim     Limits
		wantErr string
	}{
		{name: "at the default", steps: DefaultMaxSteps, lim: Limits{}},
		{name: "over the default", steps: DefaultMaxSteps + 1, lim: Limits{},
			wantErr: fmt.Sprintf("cairn.yaml: steps: %d steps, over the limit of %d steps per workflow", DefaultMaxSteps+1, DefaultMaxSteps)},
		{name: "over a lower limit", steps: 11, lim: Limits{MaxSteps: 10},
			wantErr: "cairn.yaml: steps: 11 steps, over the limit of 10 steps per workflow"},
		{name: "under a raised limit", steps: DefaultMaxSteps + 1, lim: Limits{MaxSteps: 2 * DefaultMaxSteps}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			archive := makeArchive(t, fileEntry("cairn.yaml", manyStepsManifest(tt.steps), 0o644))
			b, err := Load(context.Background(), bytes.NewReader(archive), filepath.Join(t.TempDir(), "x"), tt.lim)
			if tt.wantErr == "" {
				require.NoError(t, err)
				require.Len(t, b.Definition.Steps, tt.steps)
				return
			}
			require.ErrorIs(t, err, ErrInvalid)
			require.NotErrorIs(t, err, ErrTooLarge)
			require.Equal(t, []string{tt.wantErr}, messages(err))
		})
	}
	require.Equal(t, DefaultMaxSteps, DefaultLimits().MaxSteps)
}
