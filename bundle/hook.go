package bundle

import (
	"fmt"

	"github.com/cairnrun/cairn/expr"
)

// Hook is a webhook of a manifest (`hooks:` in cairn.yaml): POST
// /v1/hooks/{workflow}/{name} starts a run of the workflow's latest version when the
// delivery's signature checks out with the secret's newest version, or, with
// Emit, sends an event (docs/events.md) that starts, resumes and cancels what
// it matches.
type Hook struct {
	// Name names the hook in its URL: like a step key, unique in the manifest.
	Name string `yaml:"name" json:"name"`
	// Secret is the name of the secret (PUT /v1/secrets/{name}) the signature is
	// made with; like a step key.
	Secret string `yaml:"secret" json:"secret"`
	// Signature is how the delivery is signed: SignatureHMACSHA256, SignatureGitHub
	// or SignatureStripe.
	Signature string `yaml:"signature" json:"signature"`
	// Input is a CEL expression over body and headers (expr.HookEnv) whose value is
	// the run's input; default "body". Not with Emit.
	Input string `yaml:"input,omitempty" json:"input,omitempty"`
	// IdempotencyKey, when set, is a CEL expression over body and headers whose value
	// (a string or an integer) identifies the delivery: a delivery with a key seen
	// before answers the run the first one created. Without it, every delivery
	// starts a run.
	IdempotencyKey string `yaml:"idempotency_key,omitempty" json:"idempotency_key,omitempty"`
	// Emit, when set, makes a delivery send an event instead of starting a run of
	// the workflow: the event is received as POST /v1/events receives one.
	Emit *HookEmit `yaml:"emit,omitempty" json:"emit,omitempty"`
}

// HookEmit is the event a hook's delivery sends.
type HookEmit struct {
	// Event is the event's name: ^[a-z0-9][a-z0-9_.-]{0,62}$.
	Event string `yaml:"event" json:"event"`
	// Data is a CEL expression over body and headers whose value is the event's
	// data; default "body".
	Data string `yaml:"data,omitempty" json:"data,omitempty"`
	// ID, when set, is a CEL expression over body and headers whose value (a
	// string or an integer) is the event's id: the same id again is the same
	// event, received once. Unset: the hook's idempotency key names the event
	// (hook:<workflow>:<hook>:<key>), or, without one, each delivery is a new
	// event.
	ID string `yaml:"id,omitempty" json:"id,omitempty"`
}

// The signature styles of a hook.
const (
	// SignatureHMACSHA256: header X-Cairn-Signature: sha256=<hex of HMAC-SHA256 of
	// the raw body>.
	SignatureHMACSHA256 = "hmac-sha256"
	// SignatureGitHub: header X-Hub-Signature-256: sha256=<hex>, as GitHub signs.
	SignatureGitHub = "github"
	// SignatureStripe: header Stripe-Signature: t=<unix time>,v1=<hex of
	// HMAC-SHA256 of "t.body">, as Stripe signs; t within 5 minutes of now.
	SignatureStripe = "stripe"
)

// Signatures lists the signature styles.
var Signatures = []string{SignatureHMACSHA256, SignatureGitHub, SignatureStripe}

// DefaultHookInput is a hook's input expression when it sets none: the whole body.
const DefaultHookInput = "body"

// maxHooks bounds the hooks of a manifest.
const maxHooks = 32

// hooks checks the hooks: names, secrets, signature styles, and that the
// expressions compile against expr.HookEnv.
func (v *validator) hooks(hooks []Hook) {
	if len(hooks) > maxHooks {
		v.add("", "hooks", "%d hooks, over the limit of %d", len(hooks), maxHooks)
		return
	}
	first := map[string]int{}
	for i, h := range hooks {
		f := fmt.Sprintf("hooks[%d]", i)
		switch {
		case h.Name == "":
			v.add("", f+".name", "required")
		case !reKey.MatchString(h.Name):
			v.add("", f+".name", "%q must be 1 to 63 lower-case letters, digits, '_' and '-', starting with a letter or digit", h.Name)
		default:
			if j, dup := first[h.Name]; dup {
				v.add("", f+".name", "duplicate hook name %q (first used by hooks[%d])", h.Name, j)
			} else {
				first[h.Name] = i
			}
		}
		switch {
		case h.Secret == "":
			v.add("", f+".secret", "hook %q: required: the name of the secret the deliveries are signed with", h.Name)
		case !reKey.MatchString(h.Secret):
			v.add("", f+".secret", "hook %q: secret name %q must be 1 to 63 lower-case letters, digits, '_' and '-', starting with a letter or digit", h.Name, h.Secret)
		}
		switch h.Signature {
		case SignatureHMACSHA256, SignatureGitHub, SignatureStripe:
		case "":
			v.add("", f+".signature", "hook %q: required: one of %s, %s, %s", h.Name, SignatureHMACSHA256, SignatureGitHub, SignatureStripe)
		default:
			v.add("", f+".signature", "hook %q: unknown signature %q: want %s, %s or %s", h.Name, h.Signature, SignatureHMACSHA256, SignatureGitHub, SignatureStripe)
		}
		if h.Input != "" {
			if err := expr.HookEnv.Check(h.Input); err != nil {
				v.add("", f+".input", "hook %q: %v", h.Name, err)
			}
		}
		if h.IdempotencyKey != "" {
			if err := expr.HookEnv.Check(h.IdempotencyKey); err != nil {
				v.add("", f+".idempotency_key", "hook %q: %v", h.Name, err)
			}
		}
		if h.Emit != nil {
			v.hookEmit(f, &h)
		}
	}
}

// hookEmit checks the event a hook sends: its name, its expressions, and no
// field of a hook that starts a run.
func (v *validator) hookEmit(f string, h *Hook) {
	e := h.Emit
	v.eventName("", f+".emit.event", e.Event)
	if h.Input != "" {
		v.add("", f+".input", "hook %q: a hook that emits an event starts no run: the event's data is emit.data", h.Name)
	}
	if e.ID != "" && h.IdempotencyKey != "" {
		v.add("", f+".emit.id", "hook %q: emit.id and idempotency_key both name the delivery: keep one (emit.id is the event's id)", h.Name)
	}
	for _, x := range [][2]string{{"data", e.Data}, {"id", e.ID}} {
		if x[1] == "" {
			continue
		}
		if err := expr.HookEnv.Check(x[1]); err != nil {
			v.add("", f+".emit."+x[0], "hook %q: %v", h.Name, err)
		}
	}
}

// normalizeHooks returns the hooks as the Definition keeps them: input (or an
// emitting hook's emit.data) filled in.
func normalizeHooks(hooks []Hook) []Hook {
	if len(hooks) == 0 {
		return nil
	}
	out := make([]Hook, len(hooks))
	for i, h := range hooks {
		switch {
		case h.Emit != nil:
			e := *h.Emit
			if e.Data == "" {
				e.Data = DefaultHookInput
			}
			h.Emit = &e
		case h.Input == "":
			h.Input = DefaultHookInput
		}
		out[i] = h
	}
	return out
}

// Hook returns the hook of the definition named name, or nil.
func (d *Definition) Hook(name string) *Hook {
	for i := range d.Hooks {
		if d.Hooks[i].Name == name {
			return &d.Hooks[i]
		}
	}
	return nil
}
