package bundle

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestValidateHookEmit: a hook that emits an event names a valid event, its
// expressions compile over body and headers, and it has no field of a hook
// that starts a run; each mistake is refused naming the hook and its field.
func TestValidateHookEmit(t *testing.T) {
	t.Parallel()
	withHooks := func(hooks string) string {
		return "name: demo\nsteps:\n  - {key: a, builtin: noop}\nhooks:\n" + hooks
	}
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		{"valid", withHooks(`  - {name: stripe, secret: s, signature: stripe, emit: {event: payment.succeeded, data: "body.data.object", id: "body.id"}}
  - {name: gh, secret: s, signature: github, emit: {event: repo.pushed}}
  - {name: keyed, secret: s, signature: hmac-sha256, idempotency_key: "body.id", emit: {event: order.created}}
`), nil},
		{"no event", withHooks("  - {name: h, secret: s, signature: github, emit: {data: body}}\n"), []string{
			`cairn.yaml: hooks[0].emit.event: required`,
		}},
		{"bad event name", withHooks("  - {name: h, secret: s, signature: github, emit: {event: Order Created}}\n"), []string{
			`cairn.yaml: hooks[0].emit.event: event name "Order Created" must match ^[a-z0-9][a-z0-9_.-]{0,62}$`,
		}},
		{"input", withHooks("  - {name: h, secret: s, signature: github, input: body.x, emit: {event: e}}\n"), []string{
			`cairn.yaml: hooks[0].input: hook "h": a hook that emits an event starts no run: the event's data is emit.data`,
		}},
		{"two ids", withHooks("  - {name: h, secret: s, signature: github, idempotency_key: body.id, emit: {event: e, id: body.id}}\n"), []string{
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

	m, err := ParseManifest([]byte(withHooks(`  - {name: h, secret: s, signature: github, emit: {event: e, data: "input.x", id: "body."}}` + "\n")))
	require.NoError(t, err)
	errs := ValidationErrors(m.Validate(nil))
	require.Len(t, errs, 2)
	require.Equal(t, "hooks[0].emit.data", errs[0].Field)
	require.Contains(t, errs[0].Message, "names in scope: body, headers")
	require.Equal(t, "hooks[0].emit.id", errs[1].Field)

	// The definition keeps an emitting hook with its data filled in, and no input.
	def := normalize(t, withHooks("  - {name: h, secret: s, signature: github, emit: {event: e}}\n"))
	require.Equal(t, []Hook{{Name: "h", Secret: "s", Signature: SignatureGitHub, Emit: &HookEmit{Event: "e", Data: "body"}}}, def.Hooks)
}
