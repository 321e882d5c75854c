package bundle

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDefinitionQualify: deploying in a namespace keys every name the definition
// uses to reach another object (its own name and so its default limit, limits,
// secrets, events, child workflows, hooks' secrets and events); Strip gives the
// names back as written; default changes nothing.
func TestDefinitionQualify(t *testing.T) {
	m := []byte(`name: shop
defaults:
  concurrency: {limit: 2}
triggers:
  - {event: order.paid}
cancel_on:
  - {event: order.refunded}
hooks:
  - {name: gh, secret: gh-secret, signature: github, emit: {event: push}}
steps:
  - key: charge
    http:
      url: https://pay.example/charge
      headers: {Authorization: {secret: pay-token}}
    rate_limit: {name: payments, limit: 5, per: 1s}
  - key: wait
    wait_for_event: {event: order.shipped}
  - key: child
    workflow: {name: mailer}
  - key: run
    exec: [./run.sh]
    env: {DB: {secret: db}, PLAIN: x}
    compensate: {exec: [./undo.sh], env: {DB: {secret: db}}}
`)
	def := normalize(t, string(m))
	def.Qualify("default")
	require.Equal(t, "shop", def.Name)

	def.Qualify("acme")
	require.Equal(t, "acme/shop", def.Name)
	require.Equal(t, "acme/order.paid", def.Triggers[0].Event)
	require.Equal(t, "acme/order.refunded", def.CancelOn[0].Event)
	require.Equal(t, "acme/gh-secret", def.Hooks[0].Secret)
	require.Equal(t, "acme/push", def.Hooks[0].Emit.Event)
	step := func(key string) *StepDefinition {
		for i := range def.Steps {
			if def.Steps[i].Key == key {
				return &def.Steps[i]
			}
		}
		t.Fatalf("no step %s", key)
		return nil
	}
	charge, wait, child, run := step("charge"), step("wait"), step("child"), step("run")
	require.Equal(t, "acme/pay-token", charge.HTTP.Headers["Authorization"].Secret)
	require.Equal(t, "acme/payments", charge.RateLimit.Name)
	require.Equal(t, "acme/shop", charge.Concurrency.Name, "the default limit is named after the workflow")
	require.Equal(t, "acme/order.shipped", wait.WaitForEvent.Event)
	require.Equal(t, "acme/mailer", child.Workflow.Name)
	require.Equal(t, "acme/db", run.Env["DB"].Secret)
	require.Equal(t, "x", run.Env["PLAIN"].Plain)
	require.Equal(t, "acme/db", run.Compensate.Env["DB"].Secret)

	def.Strip()
	require.Equal(t, normalize(t, string(m)), def)
}
