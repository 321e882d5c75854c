package bundle

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestValidateRefusesTextTheCatalogCannotStore: a NUL character (or, where YAML can
// carry it, invalid UTF-8) in the description or in "with" keys and values makes the
// manifest invalid, naming the field; the catalog, whose text and jsonb cannot hold
// them, would otherwise refuse the version with an error of its own.
func TestValidateRefusesTextTheCatalogCannotStore(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, yaml, want string }{
		{"description NUL", "name: wf\ndescription: \"a\\x00b\"\nsteps:\n  - {key: a, builtin: noop}\n",
			"cairn.yaml: description: contains a NUL character"},
		{"description not UTF-8", "name: wf\ndescription: !!binary /w==\nsteps:\n  - {key: a, builtin: noop}\n",
			"cairn.yaml: description: is not valid UTF-8"},
		{"with value", "name: wf\nsteps:\n  - {key: a, builtin: echo, with: {value: \"a\\0b\"}}\n",
			`cairn.yaml: step "a": with.value: string contains a NUL character`},
		{"with key", "name: wf\nsteps:\n  - {key: a, builtin: echo, with: {\"k\\0\": 1}}\n",
			`cairn.yaml: step "a": with["k\x00"]: key contains a NUL character`},
		{"nested with value", "name: wf\nsteps:\n  - {key: a, builtin: echo, with: {l: [{m: \"\\0\"}]}}\n",
			`cairn.yaml: step "a": with.l[0].m: string contains a NUL character`},
	}
	for _, tt := range tests {
		m, err := ParseManifest([]byte(tt.yaml))
		require.NoError(t, err, tt.name)
		err = m.Validate(nil)
		require.ErrorIs(t, err, ErrInvalid, tt.name)
		require.EqualError(t, err, tt.want, tt.name)
	}
	// Other control characters and any Unicode text are fine.
	m, err := ParseManifest([]byte("name: wf\ndescription: \"tab\\t, bell\\a, é😀\"\nsteps:\n  - {key: a, builtin: echo, with: {v: \"\\x01\"}}\n"))
	require.NoError(t, err)
	require.NoError(t, m.Validate(nil))
}
