package api_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/catalog"
)

// emitManifest: orders started by order.created wait for the payment of their
// order; the shop's deliveries (hmac-sha256, keyed by body.id) emit
// order.created, Stripe's emit payment.succeeded with the event's object as
// data and Stripe's event id as the event's id.
const emitManifest = `name: orders
triggers:
  - {event: order.created, input: "event.data"}
steps:
  - key: pay
    wait_for_event: {event: payment.succeeded, match: "event.data.order_id == input.order_id"}
  - {key: ship, needs: [pay], builtin: echo}
hooks:
  - {name: shop, secret: hook-secret, signature: hmac-sha256, idempotency_key: "body.id", emit: {event: order.created, data: "body.order"}}
  - {name: stripe, secret: hook-secret, signature: stripe, emit: {event: payment.succeeded, data: "body.data.object", id: "body.id"}}
  - {name: anon, secret: hook-secret, signature: hmac-sha256, emit: {event: order.noted}}
`

// TestHookEmit: a delivery of a hook with emit sends its event through the
// same ingest as POST /v1/events, end to end: the shop's order.created starts
// an order (its trigger), Stripe's payment.succeeded completes its wait; a
// redelivery (same key, or same event id with a new signature time) answers
// the first event and does nothing again; a hook without a key makes an event
// per delivery.
func TestHookEmit(t *testing.T) {
	t.Parallel()
	tb, reg := setupHooksManifest(t, emitManifest)
	s := tb.store

	// The shop's delivery: order.created, keyed by the delivery, starts an order.
	order := `{"id": "del-1", "order": {"order_id": "o-9", "amount": 12}}`
	shop := map[string]string{"X-Cairn-Signature": "sha256=" + sign(hookSecret, order)}
	a := tb.deliver(t, "shop", order, shop)
	require.Equal(t, http.StatusAccepted, a.status, "%s", a.body)
	d := decode[api.HookDelivery](t, a)
	require.False(t, d.Replay)
	require.Empty(t, d.RunID, "the hook started no run itself")
	require.NotNil(t, d.Event)
	require.Equal(t, "hook:orders:shop:del-1", d.Event.EventID)
	require.Equal(t, "order.created", d.Event.Name)
	require.Equal(t, "/v1/events/"+url.PathEscape(d.Event.EventID), a.header.Get("Location"))
	require.Len(t, d.Event.Started, 1, "the trigger started an order")
	run := d.Event.Started[0].RunID
	got, err := s.RunGet(t.Context(), run)
	require.NoError(t, err)
	require.JSONEq(t, `{"order_id": "o-9", "amount": 12}`, string(got.Input))
	// The event, as GET /v1/events/{id} shows it: the hook is its actor.
	a = tb.send(t, http.MethodGet, "/v1/events/"+url.PathEscape(d.Event.EventID), nil, nil)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	require.Equal(t, "hook:orders/shop", decode[api.ReceivedEvent](t, a).Actor)

	// The shop retries the delivery, its body changed (a new timestamp): the
	// first event is the answer, and no second order starts.
	retry := `{"id": "del-1", "order": {"order_id": "o-9", "amount": 12}, "sent_at": 2}`
	a = tb.deliver(t, "shop", retry, map[string]string{"X-Cairn-Signature": "sha256=" + sign(hookSecret, retry)})
	require.Equal(t, http.StatusAccepted, a.status, "%s", a.body)
	again := decode[api.HookDelivery](t, a)
	require.True(t, again.Replay)
	require.Equal(t, d.Event.Started, again.Event.Started)
	require.Equal(t, 1, tb.runCount(t))

	// The order waits for its payment; Stripe's delivery completes the wait.
	require.False(t, waitStep(t, s, run))
	pay := `{"id": "evt_77", "type": "payment_intent.succeeded", "data": {"object": {"order_id": "o-9"}}}`
	a = tb.deliver(t, "stripe", pay, map[string]string{"Stripe-Signature": stripeHeader(hookSecret, pay, time.Now())})
	require.Equal(t, http.StatusAccepted, a.status, "%s", a.body)
	d = decode[api.HookDelivery](t, a)
	require.Equal(t, "evt_77", d.Event.EventID, "emit.id names the event")
	require.Equal(t, []catalog.EventResumed{{RunID: run, Step: "pay"}}, d.Event.Resumed)
	step := stepOf(t, s, run, "pay")
	require.Equal(t, catalog.StepSucceeded, step.Status)
	var output struct {
		ID   string          `json:"id"`
		Data json.RawMessage `json:"data"`
	}
	require.NoError(t, json.Unmarshal(step.Output, &output))
	require.Equal(t, "evt_77", output.ID)
	require.JSONEq(t, `{"order_id": "o-9"}`, string(output.Data))
	// Stripe redelivers it (signed anew): the same event, nothing resumed again.
	a = tb.deliver(t, "stripe", pay, map[string]string{"Stripe-Signature": stripeHeader(hookSecret, pay, time.Now().Add(time.Second))})
	require.Equal(t, http.StatusAccepted, a.status, "%s", a.body)
	again = decode[api.HookDelivery](t, a)
	require.True(t, again.Replay)
	require.True(t, again.Event.Duplicate)

	// A hook without a key: each delivery is an event of its own.
	note := `{"text": "hi"}`
	ids := map[string]bool{}
	for range 2 {
		a = tb.deliver(t, "anon", note, map[string]string{"X-Cairn-Signature": "sha256=" + sign(hookSecret, note)})
		require.Equal(t, http.StatusAccepted, a.status, "%s", a.body)
		id := decode[api.HookDelivery](t, a).Event.EventID
		_, err := uuid.Parse(id)
		require.NoError(t, err, "a new id: %s", id)
		ids[id] = true
	}
	require.Len(t, ids, 2)
	require.Equal(t, map[string]float64{"emitted": 4, "replay": 2}, hookDeliveries(t, reg))

	// A bad signature emits nothing.
	a = tb.deliver(t, "anon", note, map[string]string{"X-Cairn-Signature": "sha256=" + sign("wrong", note)})
	require.Equal(t, http.StatusUnauthorized, a.status)
	list, err := s.ReceivedEventList(t.Context(), catalog.ReceivedEventListParams{Name: "order.noted"})
	require.NoError(t, err)
	require.Len(t, list, 2)
}

// TestHookEmitErrors: an expression of emit that fails is a 422 naming its
// field, and nothing is received.
func TestHookEmitErrors(t *testing.T) {
	t.Parallel()
	tb, _ := setupHooksManifest(t, emitManifest)

	for _, tc := range []struct{ hook, body, header, location string }{
		{"stripe", `{"id": "evt_1"}`, "Stripe-Signature", "cairn.yaml#hooks[1].emit.data"},
		{"stripe", `{"data": {"object": {}}}`, "Stripe-Signature", "cairn.yaml#hooks[1].emit.id"},
		{"shop", `{"id": "d", "order": {"note": "a\u0000b"}}`, "X-Cairn-Signature", "cairn.yaml#hooks[0].emit.data"},
	} {
		sig := "sha256=" + sign(hookSecret, tc.body)
		if tc.header == "Stripe-Signature" {
			sig = stripeHeader(hookSecret, tc.body, time.Now())
		}
		a := tb.deliver(t, tc.hook, tc.body, map[string]string{tc.header: sig})
		require.Equal(t, http.StatusUnprocessableEntity, a.status, "%s", a.body)
		require.Len(t, a.problem.Errors, 1)
		require.Equal(t, tc.location, a.problem.Errors[0].Location)
	}
	list, err := tb.store.ReceivedEventList(t.Context(), catalog.ReceivedEventListParams{})
	require.NoError(t, err)
	require.Empty(t, list)
}
