package bundle

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestErrorsNameStepsByKey: a deploy error about a step names it by its key, as a
// user wrote it in cairn.yaml (`step "bstep": when: …`), not by its place in the
// list (`steps[1].when`); only an error about the key itself (missing or
// duplicated), where no key names the step, keeps the place.
func TestErrorsNameStepsByKey(t *testing.T) {
	t.Parallel()
	steps := func(s string) string { return "name: demo\nsteps:\n  - {key: astep, builtin: noop}\n" + s }
	tests := []struct {
		name, yaml string
		want       string
	}{
		{"bad when", steps("  - {key: bstep, needs: [astep], builtin: noop, when: \"input.(\"}\n"),
			`cairn.yaml: step "bstep": when: bad expression: `},
		{"unknown need", steps("  - {key: bstep, needs: [zstep], builtin: noop}\n"),
			`cairn.yaml: step "bstep": needs: needs unknown step "zstep"`},
		{"no function", steps("  - {key: bstep}\n"),
			`cairn.yaml: step "bstep": has no function: set exactly one of`},
		{"two functions", steps("  - {key: bstep, builtin: noop, sleep: 1h}\n"),
			`cairn.yaml: step "bstep": sets builtin and sleep: set exactly one of`},
		{"cycle", steps("  - {key: bstep, needs: [cstep], builtin: noop}\n  - {key: cstep, needs: [bstep], builtin: noop}\n"),
			`cairn.yaml: step "bstep": needs: is part of a dependency cycle: bstep → cstep → bstep`},
		{"after without needs", steps("  - {key: bstep, builtin: noop, after: all_done}\n"),
			`cairn.yaml: step "bstep": after: needs no step: a trigger rule has nothing to follow`},
		{"compensation", steps("  - {key: bstep, builtin: noop, compensate: {sleep: 1h}}\n"),
			`cairn.yaml: step "bstep": compensate.sleep: a compensation runs a function`},
		{"compensation key taken", steps("  - {key: bstep, builtin: noop, compensate: {builtin: noop}}\n  - {key: compensate-bstep, builtin: noop}\n"),
			`cairn.yaml: step "bstep": compensate: its compensation runs as step "compensate-bstep", which is the key of another step`},
		{"on_failure", steps("on_failure:\n  - {key: notify, builtin: nope}\n"),
			`cairn.yaml: on_failure step "notify": builtin: unknown built-in "nope"`},
		{"bad retry", steps("  - {key: bstep, builtin: noop, retry: {max_attempts: 0}}\n"),
			`cairn.yaml: step "bstep": retry.max_attempts: `},
		{"duplicate key keeps the place", steps("  - {key: astep, builtin: noop}\n"),
			`cairn.yaml: steps[1].key: duplicate step key "astep" (first used by steps[0])`},
		{"missing key keeps the place", steps("  - {builtin: noop}\n"),
			`cairn.yaml: steps[1].key: required`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := validateError(t, tt.yaml)
			require.Contains(t, err.Error(), tt.want)
			if !strings.Contains(tt.name, "keeps the place") {
				require.NotContains(t, err.Error(), "steps[", "no step is named by its place")
			}
			for _, ve := range ValidationErrors(err) {
				require.True(t, strings.HasPrefix(ve.Field, "steps[") || strings.HasPrefix(ve.Field, "on_failure["),
					"the field stays a path into the document, for tools: %q", ve.Field)
			}
		})
	}
}
