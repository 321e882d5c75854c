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
		// A hook that emits an event names a valid event and has no field of a
		// hook that starts a run.
		{"emit", withHooks(`  - {name: stripe, secret: s, signature: stripe, emit: {event: payment.succeeded, data: "body.data.object", id: "body.id"}}
  - {name: gh, secret: s, signature: github, emit: {event: repo.pushed}}
  - {name: keyed, secret: s, signature: hmac-sha256, idempotency_key: "body.id", emit: {event: order.created}}
`), nil},
		{"emit no event", withHooks("  - {name: h, secret: s, signature: github, emit: {data: body}}\n"), []string{
			`cairn.yaml: hooks[0].emit.event: required`,
		}},
		{"emit bad event name", withHooks("  - {name: h, secret: s, signature: github, emit: {event: Order Created}}\n"), []string{
			`cairn.yaml: hooks[0].emit.event: event name "Order Created" must match ^[a-z0-9][a-z0-9_.-]{0,62}$`,
		}},
		{"emit with input", withHooks("  - {name: h, secret: s, signature: github, input: body.x, emit: {event: e}}\n"), []string{
			`cairn.yaml: hooks[0].input: hook "h": a hook that emits an event starts no run: the event's data is emit.data`,
		}},
		{"emit with two ids", withHooks("  - {name: h, secret: s, signature: github, idempotency_key: body.id, emit: {event: e, id: body.id}}\n"), []string{
			`cairn.yaml: hooks[0].emit.id: hook "h": emit.id and idempotency_key both name the delivery: keep one (emit.id is the event's id)`,
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

	// So are emit's.
	m, err = ParseManifest([]byte(withHooks(`  - {name: h, secret: s, signature: github, emit: {event: e, data: "input.x", id: "body."}}` + "\n")))
	require.NoError(t, err)
	errs = ValidationErrors(m.Validate(nil))
	require.Len(t, errs, 2)
	require.Equal(t, "hooks[0].emit.data", errs[0].Field)
	require.Contains(t, errs[0].Message, "names in scope: body, headers")
	require.Equal(t, "hooks[0].emit.id", errs[1].Field)
}

// TestNormalizeHooks: the definition keeps the hooks with input (or emit.data)
// filled in; a definition without hooks keeps the fingerprint it had before
// hooks existed.
func TestNormalizeHooks(t *testing.T) {
	t.Parallel()
	plain := "name: demo\nsteps:\n  - {key: a, builtin: noop}\n"
	def := normalize(t, plain+"hooks:\n  - {name: gh, secret: gh, signature: github}\n")
	require.Equal(t, []Hook{{Name: "gh", Secret: "gh", Signature: SignatureGitHub, Input: "body"}}, def.Hooks)
	require.Equal(t, &def.Hooks[0], def.Hook("gh"))
	require.Nil(t, def.Hook("other"))
	require.NotContains(t, string(mustCanonical(t, normalize(t, plain))), "hooks")

	// An emitting hook is kept with its data filled in, and no input.
	def = normalize(t, plain+"hooks:\n  - {name: h, secret: s, signature: github, emit: {event: e}}\n")
	require.Equal(t, []Hook{{Name: "h", Secret: "s", Signature: SignatureGitHub, Emit: &HookEmit{Event: "e", Data: "body"}}}, def.Hooks)
}

func mustCanonical(t *testing.T, def *Definition) []byte {
	t.Helper()
	b, err := def.CanonicalJSON()
	require.NoError(t, err)
	return []byte(strings.TrimSpace(string(b)))
}
