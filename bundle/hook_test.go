package bundle

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestValidateHooks(t *testing.T) {
	t.Parallel()
	withHooks := func(hooks string) string {
		return "name: demo\nsteps:\n  - {key: a, builtin: noop}\nhooks:\n" + hooks
	}
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		{"valid", withHooks(`  - {name: stripe, secret: stripe-hook, signature: stripe, input: "body.data", idempotency_key: "body.id"}
  - {name: gh, secret: gh, signature: github, idempotency_key: "headers['x-github-delivery']"}
  - {name: plain, secret: s, signature: hmac-sha256}
`), nil},
		{"missing fields", withHooks("  - {name: x}\n"), []string{
			`cairn.yaml: hooks[0].secret: hook "x": required: the name of the secret the deliveries are signed with`,
			`cairn.yaml: hooks[0].signature: hook "x": required: one of hmac-sha256, github, stripe`,
		}},
		{"bad names", withHooks("  - {name: Bad, secret: Not Secret, signature: github}\n  - {name: '', secret: s, signature: github}\n"), []string{
			`cairn.yaml: hooks[0].name: "Bad" must be 1 to 63 lower-case letters, digits, '_' and '-', starting with a letter or digit`,
			`cairn.yaml: hooks[0].secret: hook "Bad": secret name "Not Secret" must be 1 to 63 lower-case letters, digits, '_' and '-', starting with a letter or digit`,
			`cairn.yaml: hooks[1].name: required`,
		}},
		{"duplicate", withHooks("  - {name: h, secret: s, signature: github}\n  - {name: h, secret: s, signature: github}\n"), []string{
			`cairn.yaml: hooks[1].name: duplicate hook name "h" (first used by hooks[0])`,
		}},
		{"unknown signature", withHooks("  - {name: h, secret: s, signature: sha1}\n"), []string{
			`cairn.yaml: hooks[0].signature: hook "h": unknown signature "sha1": want hmac-sha256, github or stripe`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, err := ParseManifest([]byte(tt.yaml))
			require.NoError(t, err)
			require.Equal(t, tt.want, messages(m.Validate(nil)))
		})
	}

	// A bad expression is refused naming the hook and the field, and what is wrong.
	m, err := ParseManifest([]byte(withHooks(`  - {name: h, secret: s, signature: github, input: "body.", idempotency_key: "input.id"}` + "\n")))
	require.NoError(t, err)
	errs := ValidationErrors(m.Validate(nil))
	require.Len(t, errs, 2)
	require.Equal(t, "hooks[0].input", errs[0].Field)
	require.Contains(t, errs[0].Message, `hook "h": `)
	require.Equal(t, "hooks[0].idempotency_key", errs[1].Field)
	require.Contains(t, errs[1].Message, "undeclared reference to 'input'")
	require.Contains(t, errs[1].Message, "names in scope: body, headers")
}

// TestNormalizeHooks: the definition keeps the hooks with input filled in; a
// definition without hooks keeps the fingerprint it had before hooks existed.
func TestNormalizeHooks(t *testing.T) {
	t.Parallel()
	plain := "name: demo\nsteps:\n  - {key: a, builtin: noop}\n"
	def := normalize(t, plain+"hooks:\n  - {name: gh, secret: gh, signature: github}\n")
	require.Equal(t, []Hook{{Name: "gh", Secret: "gh", Signature: SignatureGitHub, Input: "body"}}, def.Hooks)
	require.Equal(t, &def.Hooks[0], def.Hook("gh"))
	require.Nil(t, def.Hook("other"))
	require.NotContains(t, string(mustCanonical(t, normalize(t, plain))), "hooks")
}

func mustCanonical(t *testing.T, def *Definition) []byte {
	t.Helper()
	b, err := def.CanonicalJSON()
	require.NoError(t, err)
	return []byte(strings.TrimSpace(string(b)))
}
