package api_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/api"
)

const hookSecret = "whsec_hook-secret-0123456789"

const hookManifest = `name: orders
steps:
  - {key: a, builtin: noop}
hooks:
  - {name: plain, secret: hook-secret, signature: hmac-sha256, input: '{"raw": body, "event": "x-event" in headers ? headers["x-event"] : ""}'}
  - {name: gh, secret: hook-secret, signature: github, input: "body.order", idempotency_key: "headers['x-github-delivery']"}
  - {name: stripe, secret: hook-secret, signature: stripe, idempotency_key: "body.id"}
  - {name: broken, secret: hook-secret, signature: hmac-sha256, input: "body.missing.deeper"}
  - {name: unset, secret: never-set, signature: hmac-sha256}
  - {name: ghd, secret: hook-secret, signature: github}
`

func sign(secret, msg string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(msg))
	return hex.EncodeToString(m.Sum(nil))
}

func stripeHeader(secret, body string, at time.Time) string {
	t := fmt.Sprint(at.Unix())
	return "t=" + t + ",v1=" + sign(secret, t+"."+body)
}

// setupHooks deploys hookManifest and sets its secret.
func setupHooks(t *testing.T) *testBundle {
	t.Helper()
	tb, _ := setupHooksRegistry(t)
	return tb
}

// setupHooksRegistry is setupHooks, with the registry of the server's metrics.
func setupHooksRegistry(t *testing.T) (*testBundle, *prometheus.Registry) {
	t.Helper()
	return setupHooksManifest(t, hookManifest)
}

// setupHooksManifest deploys manifest and sets the secret hook-secret.
func setupHooksManifest(t *testing.T, manifest string) (*testBundle, *prometheus.Registry) {
	t.Helper()
	tb, reg := setupWithSecretsRegistry(t, testKeyring(t))
	status, out := tb.upload(t, bytes.NewReader(archive(t, entry{name: "cairn.yaml", body: manifest})))
	require.Equal(t, http.StatusCreated, status, "%v", out)
	a := tb.sendAs(t, adminToken, http.MethodPut, "/v1/secrets/hook-secret", nil, []byte(`{"value":"`+hookSecret+`"}`))
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	return tb, reg
}

// deliver posts body to a hook with headers, and no token.
func (tb *testBundle) deliver(t *testing.T, hook, body string, header map[string]string) *answer {
	t.Helper()
	return tb.sendAs(t, "", http.MethodPost, "/v1/hooks/orders/"+hook, header, []byte(body))
}

func (tb *testBundle) runCount(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, tb.store.DB().GetContext(context.Background(), &n, `SELECT count(*) FROM runs`))
	return n
}

// TestHookSignatures: each signature style, good, bad and missing, and a stale
// Stripe timestamp. Only the good ones start a run.
func TestHookSignatures(t *testing.T) {
	t.Parallel()
	tb, reg := setupHooksRegistry(t)
	const body = `{"id": "evt_1", "order": {"n": 42}}`
	now := time.Now()
	tests := []struct {
		name, hook string
		header     map[string]string
		wantStatus int
		wantDetail string
	}{
		{"hmac good", "plain", map[string]string{"X-Cairn-Signature": "sha256=" + sign(hookSecret, body)}, 202, ""},
		{"hmac bad", "plain", map[string]string{"X-Cairn-Signature": "sha256=" + sign("another secret", body)}, 401, "does not match"},
		{"hmac not hex", "plain", map[string]string{"X-Cairn-Signature": "sha256=zz"}, 401, "does not match"},
		{"hmac missing", "plain", nil, 401, "must be signed"},
		{"hmac in another style's header", "plain", map[string]string{"X-Hub-Signature-256": "sha256=" + sign(hookSecret, body)}, 401, "no X-Cairn-Signature header"},
		{"github good", "gh", map[string]string{"X-Hub-Signature-256": "sha256=" + sign(hookSecret, body), "X-GitHub-Delivery": "d-1"}, 202, ""},
		{"github bad", "gh", map[string]string{"X-Hub-Signature-256": "sha256=" + sign(hookSecret, body+" "), "X-GitHub-Delivery": "d-2"}, 401, "does not match"},
		{"github missing", "gh", map[string]string{"X-GitHub-Delivery": "d-3"}, 401, "must be signed"},
		{"stripe good", "stripe", map[string]string{"Stripe-Signature": stripeHeader(hookSecret, body, now)}, 202, ""},
		{"stripe bad", "stripe", map[string]string{"Stripe-Signature": stripeHeader("wrong", body, now)}, 401, "does not match"},
		{"stripe missing v1", "stripe", map[string]string{"Stripe-Signature": fmt.Sprintf("t=%d", now.Unix())}, 401, "lacks"},
		{"stripe stale", "stripe", map[string]string{"Stripe-Signature": stripeHeader(hookSecret, body, now.Add(-6*time.Minute))}, 401, "tolerance"},
		{"stripe future", "stripe", map[string]string{"Stripe-Signature": stripeHeader(hookSecret, body, now.Add(6*time.Minute))}, 401, "tolerance"},
		{"secret never set", "unset", map[string]string{"X-Cairn-Signature": "sha256=" + sign(hookSecret, body)}, 401, "secret is not set"},
	}
	started := 0
	for _, tt := range tests {
		before := tb.runCount(t)
		a := tb.deliver(t, tt.hook, body, tt.header)
		require.Equal(t, tt.wantStatus, a.status, "%s: %s", tt.name, a.body)
		if tt.wantStatus != http.StatusAccepted {
			require.Equal(t, "unauthorized", a.problem.Code, tt.name)
			require.Contains(t, a.problem.Detail, tt.wantDetail, tt.name)
			require.Equal(t, before, tb.runCount(t), "%s: a refused delivery started nothing", tt.name)
			continue
		}
		started++
		d := decode[api.HookDelivery](t, a)
		require.False(t, d.Replay, tt.name)
		require.Equal(t, "orders", d.Workflow)
		require.Equal(t, 1, d.Version)
	}
	require.Equal(t, started, tb.runCount(t))
	require.Equal(t, map[string]float64{"refused": float64(len(tests) - started), "started": float64(started)}, hookDeliveries(t, reg))
}

// TestHookInputAndReplay: the input expression maps body and headers; a replay of a
// delivery (same idempotency key) answers the first run; the run is labelled with
// the hook.
func TestHookInputAndReplay(t *testing.T) {
	t.Parallel()
	tb, reg := setupHooksRegistry(t)
	body := `{"order": {"n": 7, "sku": "x"}}`
	header := map[string]string{"X-Hub-Signature-256": "sha256=" + sign(hookSecret, body), "X-GitHub-Delivery": "72d3162e"}
	a := tb.deliver(t, "gh", body, header)
	require.Equal(t, http.StatusAccepted, a.status, "%s", a.body)
	first := decode[api.HookDelivery](t, a)
	a = tb.deliver(t, "gh", body, header)
	require.Equal(t, http.StatusAccepted, a.status, "%s", a.body)
	again := decode[api.HookDelivery](t, a)
	require.Equal(t, first.RunID, again.RunID, "a replay answers the same run")
	require.True(t, again.Replay)
	require.Equal(t, 1, tb.runCount(t))
	require.Equal(t, map[string]float64{"started": 1, "replay": 1}, hookDeliveries(t, reg))

	a = tb.send(t, http.MethodGet, "/v1/runs/"+first.RunID, nil, nil)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	run := decode[api.Run](t, a)
	require.JSONEq(t, `{"n": 7, "sku": "x"}`, string(run.Input))
	require.Equal(t, map[string]string{"hook": "gh"}, run.Labels)

	// Another delivery is another run.
	header["X-GitHub-Delivery"] = "another"
	a = tb.deliver(t, "gh", body, header)
	require.Equal(t, http.StatusAccepted, a.status, "%s", a.body)
	require.NotEqual(t, first.RunID, decode[api.HookDelivery](t, a).RunID)

	// A body that is not JSON is seen as a string; headers by lower-case name.
	text := "hello=world&a=b"
	a = tb.deliver(t, "plain", text, map[string]string{"X-Cairn-Signature": "sha256=" + sign(hookSecret, text), "X-Event": "push", "Content-Type": "application/x-www-form-urlencoded"})
	require.Equal(t, http.StatusAccepted, a.status, "%s", a.body)
	a = tb.send(t, http.MethodGet, "/v1/runs/"+decode[api.HookDelivery](t, a).RunID, nil, nil)
	require.JSONEq(t, `{"raw": "hello=world&a=b", "event": "push"}`, string(decode[api.Run](t, a).Input))
}

// TestHookErrors: unknown workflow and hook are 404s, a failing expression is a 422
// naming the manifest field, a body over 1 MiB a 413; none starts a run.
func TestHookErrors(t *testing.T) {
	t.Parallel()
	tb := setupHooks(t)
	body := `{"id": 1}`
	sig := map[string]string{"X-Cairn-Signature": "sha256=" + sign(hookSecret, body)}

	a := tb.sendAs(t, "", http.MethodPost, "/v1/hooks/nope/plain", sig, []byte(body))
	require.Equal(t, http.StatusNotFound, a.status, "%s", a.body)
	a = tb.deliver(t, "nope", body, sig)
	require.Equal(t, http.StatusNotFound, a.status, "%s", a.body)
	require.Contains(t, a.problem.Detail, `no hook "nope"`)

	a = tb.deliver(t, "broken", body, sig)
	require.Equal(t, http.StatusUnprocessableEntity, a.status, "%s", a.body)
	require.Equal(t, []string{"cairn.yaml#hooks[3].input"}, a.locations())

	big := `{"pad": "` + strings.Repeat("x", 1<<20) + `"}`
	a = tb.deliver(t, "plain", big, map[string]string{"X-Cairn-Signature": "sha256=" + sign(hookSecret, big)})
	require.Equal(t, http.StatusRequestEntityTooLarge, a.status, "%s", a.body)
	require.Equal(t, 0, tb.runCount(t))
}

// TestHookWithoutSecretKey: a server without a secret key says so.
func TestHookWithoutSecretKey(t *testing.T) {
	t.Parallel()
	tb := setupWithSecrets(t, nil)
	a := tb.sendAs(t, "", http.MethodPost, "/v1/hooks/orders/gh", map[string]string{"X-Hub-Signature-256": "sha256=00"}, []byte(`{}`))
	require.Equal(t, http.StatusServiceUnavailable, a.status, "%s", a.body)
	require.Equal(t, "secret_key_missing", a.problem.Code)
}

// TestHookRefusedAtDeploy: a hook whose expression does not compile is refused at
// deploy, naming the hook and the field.
func TestHookRefusedAtDeploy(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	m := "name: orders\nsteps:\n  - {key: a, builtin: noop}\nhooks:\n  - {name: gh, secret: s, signature: github, idempotency_key: 'input.id'}\n"
	status, out := tb.upload(t, bytes.NewReader(archive(t, entry{name: "cairn.yaml", body: m})))
	require.Equal(t, http.StatusBadRequest, status, "%v", out)
	require.Equal(t, "invalid_bundle", out["code"])
	errs := out["errors"].([]any)
	require.Len(t, errs, 1)
	e := errs[0].(map[string]any)
	require.Equal(t, "cairn.yaml#hooks[0].idempotency_key", e["location"])
	require.Contains(t, e["message"], `hook "gh"`)
	require.Contains(t, e["message"], "undeclared reference to 'input'")
}

// hookDeliveries reads cairn_api_hook_deliveries_total by outcome.
func hookDeliveries(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "cairn_api_hook_deliveries_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" {
					out[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// TestHookGitHubDeliveryKey: a github hook without an
// idempotency_key started a run for every replay of a delivery. Its key is now
// GitHub's delivery ID (X-GitHub-Delivery): the same delivery again answers the
// first run, another delivery starts its own. An hmac-sha256 hook without a key
// still starts a run for each delivery, replays included (as documented).
func TestHookGitHubDeliveryKey(t *testing.T) {
	t.Parallel()
	tb := setupHooks(t)
	body := `{"order": {"n": 7}}`
	header := map[string]string{"X-Hub-Signature-256": "sha256=" + sign(hookSecret, body), "X-GitHub-Delivery": "f0e1d2c3-b4a5"}
	a := tb.deliver(t, "ghd", body, header)
	require.Equal(t, http.StatusAccepted, a.status, "%s", a.body)
	first := decode[api.HookDelivery](t, a)
	require.False(t, first.Replay)
	a = tb.deliver(t, "ghd", body, header)
	require.Equal(t, http.StatusAccepted, a.status, "%s", a.body)
	again := decode[api.HookDelivery](t, a)
	require.True(t, again.Replay, "the replayed delivery started nothing")
	require.Equal(t, first.RunID, again.RunID)

	header["X-GitHub-Delivery"] = "a9b8c7d6-e5f4"
	a = tb.deliver(t, "ghd", body, header)
	require.Equal(t, http.StatusAccepted, a.status, "%s", a.body)
	other := decode[api.HookDelivery](t, a)
	require.False(t, other.Replay)
	require.NotEqual(t, first.RunID, other.RunID, "another delivery, another run")
	require.Equal(t, 2, tb.runCount(t))

	plain := map[string]string{"X-Cairn-Signature": "sha256=" + sign(hookSecret, body)}
	for range 2 {
		a = tb.deliver(t, "plain", body, plain)
		require.Equal(t, http.StatusAccepted, a.status, "%s", a.body)
		require.False(t, decode[api.HookDelivery](t, a).Replay)
	}
	require.Equal(t, 4, tb.runCount(t), "an hmac-sha256 hook without a key has no replay protection")
}

// TestHookTextTheCatalogRefuses: a delivery whose body holds a
// \u0000 was a 400 bad_request ("database refused a value"); it is the sender's
// input, a 422 validation_failed naming the hook's input and where in it. Nothing
// is started.
func TestHookTextTheCatalogRefuses(t *testing.T) {
	t.Parallel()
	tb := setupHooks(t)
	for _, body := range []string{`{"a":"\u0000"}`, `{"a":{"b":["x\u0000y"]}}`} {
		a := tb.deliver(t, "plain", body, map[string]string{"X-Cairn-Signature": "sha256=" + sign(hookSecret, body)})
		require.Equal(t, http.StatusUnprocessableEntity, a.status, "%s", a.body)
		require.Equal(t, "validation_failed", a.problem.Code)
		require.Len(t, a.problem.Errors, 1)
		require.Equal(t, "cairn.yaml#hooks[0].input", a.problem.Errors[0].Location)
		require.Contains(t, a.problem.Errors[0].Message, "the input.raw.a")
		require.Contains(t, a.problem.Errors[0].Message, "NUL")
	}
	require.Zero(t, tb.runCount(t))

	body := `{"id": "evt\u0000x", "order": {"n": 1}}`
	a := tb.deliver(t, "stripe", body, map[string]string{"Stripe-Signature": stripeHeader(hookSecret, body, time.Now())})
	require.Equal(t, http.StatusUnprocessableEntity, a.status, "the input holds it too: %s", a.body)
	require.Equal(t, "validation_failed", a.problem.Code)
	require.Zero(t, tb.runCount(t))
}
