package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/internal/testenv"
)

// eventManifest: an order started by order.created waits for the payment of its
// order, and is canceled by order.cancelled of its order.
const eventManifest = `name: orders
triggers:
  - {event: order.created, if: "event.data.amount > 0", input: "event.data"}
cancel_on:
  - {event: order.cancelled, match: "event.data.order_id == input.order_id"}
steps:
  - key: pay
    wait_for_event: {event: payment.succeeded, match: "event.data.order_id == input.order_id"}
  - {key: ship, needs: [pay], builtin: echo}
`

// setupEvents serves a catalog whose latest orders version is eventManifest's.
func setupEvents(t *testing.T) *testBundle {
	t.Helper()
	ctx := context.Background()
	store := catalog.New(testenv.DB(t), nil)
	tokens, err := api.ParseTokens("operator:alice:" + operatorToken)
	require.NoError(t, err)
	hs := httptest.NewServer(api.New(store, testenv.Blobs(t), &api.Config{Tokens: tokens, TempDir: t.TempDir()}).Handler())
	t.Cleanup(hs.Close)
	m, err := bundle.ParseManifest([]byte(eventManifest))
	require.NoError(t, err)
	def, err := m.Normalize()
	require.NoError(t, err)
	canonical, err := def.CanonicalJSON()
	require.NoError(t, err)
	var steps []catalog.NewStep
	for _, s := range def.Steps {
		steps = append(steps, catalog.NewStep{Key: s.Key, Needs: s.Needs, MaxAttempts: s.Retry.MaxAttempts})
	}
	digest := "sha256:" + fakeHex("orders-events")
	_, _, err = store.VersionRegister(ctx, &catalog.VersionRegisterParams{Workflow: "orders", Digest: digest, Size: 1,
		BlobKey: "bundles/x", Definition: canonical, Fingerprint: digest, Steps: steps})
	require.NoError(t, err)
	return &testBundle{store: store, url: hs.URL}
}

// sendEvent posts an event and decodes the answer.
func (tb *testBundle) sendEvent(t *testing.T, body string) (int, api.EventAnswer) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, tb.url+"/v1/events", bytes.NewReader([]byte(body)))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+operatorToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out api.EventAnswer
	if resp.StatusCode == http.StatusAccepted {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	}
	return resp.StatusCode, out
}

// waitStep claims the pay step of run and suspends it as a dispatcher does;
// took says it took a buffered event.
func waitStep(t *testing.T, s *catalog.Store, run uuid.UUID) bool {
	t.Helper()
	ctx := context.Background()
	claimed, err := s.StepClaim(ctx, "d1", 16, time.Minute)
	require.NoError(t, err)
	for _, c := range claimed {
		if c.RunID != run || c.Key != "pay" {
			continue
		}
		took, err := s.EventWaitSuspend(ctx, catalog.Lease{RunID: c.RunID, Key: c.Key, Token: c.LeaseToken},
			catalog.EventWait{Wait: catalog.Wait{Name: "payment.succeeded"}, Match: "event.data.order_id == input.order_id"})
		require.NoError(t, err)
		return took
	}
	t.Fatalf("the pay step of run %s was not claimed (claimed %v)", run, claimed)
	return false
}

func stepOf(t *testing.T, s *catalog.Store, run uuid.UUID, key string) catalog.Step {
	t.Helper()
	steps, err := s.StepList(context.Background(), run)
	require.NoError(t, err)
	for _, st := range steps {
		if st.Key == key {
			return st
		}
	}
	t.Fatalf("run %s has no step %s", run, key)
	return catalog.Step{}
}

// TestEventOrderPaths: order.created starts an order (its trigger's if and input),
// payment.succeeded of its order completes its wait, whether it comes after the
// wait began or before (buffered), another order's payment does not, and
// order.cancelled of its order cancels it.
func TestEventOrderPaths(t *testing.T) {
	t.Parallel()
	tb := setupEvents(t)
	s := tb.store

	status, ans := tb.sendEvent(t, `{"name": "order.created", "data": {"order_id": "o1", "amount": 5}}`)
	require.Equal(t, http.StatusAccepted, status)
	require.Len(t, ans.Started, 1)
	o1 := ans.Started[0].RunID
	run, err := s.RunGet(context.Background(), o1)
	require.NoError(t, err)
	require.JSONEq(t, `{"order_id": "o1", "amount": 5}`, string(run.Input))
	// The trigger's if: an order of amount 0 starts nothing.
	_, ans = tb.sendEvent(t, `{"name": "order.created", "data": {"order_id": "o0", "amount": 0}}`)
	require.Empty(t, ans.Started)

	require.False(t, waitStep(t, s, o1), "no payment yet")
	_, ans = tb.sendEvent(t, `{"name": "payment.succeeded", "data": {"order_id": "o2"}}`)
	require.Empty(t, ans.Resumed, "another order's payment")
	_, ans = tb.sendEvent(t, `{"name": "payment.succeeded", "id": "pay-o1", "data": {"order_id": "o1"}}`)
	require.Equal(t, []catalog.EventResumed{{RunID: o1, Step: "pay"}}, ans.Resumed)
	pay := stepOf(t, s, o1, "pay")
	require.Equal(t, catalog.StepSucceeded, pay.Status)
	var out struct {
		ID   string          `json:"id"`
		Data json.RawMessage `json:"data"`
	}
	require.NoError(t, json.Unmarshal(pay.Output, &out))
	require.Equal(t, "pay-o1", out.ID)
	require.JSONEq(t, `{"order_id": "o1"}`, string(out.Data))

	// Buffered: the payment comes before the step waits.
	_, ans = tb.sendEvent(t, `{"name": "order.created", "data": {"order_id": "o3", "amount": 1}}`)
	o3 := ans.Started[0].RunID
	_, ans = tb.sendEvent(t, `{"name": "payment.succeeded", "data": {"order_id": "o3"}}`)
	require.Empty(t, ans.Resumed)
	require.True(t, waitStep(t, s, o3), "the buffered payment is taken")
	require.Equal(t, catalog.StepSucceeded, stepOf(t, s, o3, "pay").Status)

	// cancel_on: only the run of that order.
	_, ans = tb.sendEvent(t, `{"name": "order.created", "data": {"order_id": "o4", "amount": 1}}`)
	o4 := ans.Started[0].RunID
	_, ans = tb.sendEvent(t, `{"name": "order.created", "data": {"order_id": "o5", "amount": 1}}`)
	o5 := ans.Started[0].RunID
	_, ans = tb.sendEvent(t, `{"name": "order.cancelled", "data": {"order_id": "o4"}}`)
	require.Equal(t, []uuid.UUID{o4}, ans.Canceled)
	r4, err := s.RunGet(context.Background(), o4)
	require.NoError(t, err)
	require.Equal(t, catalog.RunCanceled, r4.Status)
	r5, err := s.RunGet(context.Background(), o5)
	require.NoError(t, err)
	require.NotEqual(t, catalog.RunCanceled, r5.Status)

	// An event no one names is stored and does nothing.
	status, ans = tb.sendEvent(t, `{"name": "nobody.cares", "data": 1}`)
	require.Equal(t, http.StatusAccepted, status)
	require.Empty(t, ans.Started)
	require.Empty(t, ans.Resumed)
	require.Empty(t, ans.Canceled)
}

// TestEventIdempotency: the same id posted 50 times at once has one effect and 50
// equal answers; the same id with other data is a 409.
func TestEventIdempotency(t *testing.T) {
	t.Parallel()
	tb := setupEvents(t)
	body := `{"name": "order.created", "id": "evt-1", "data": {"order_id": "o1", "amount": 3}}`
	answers := make([]api.EventAnswer, 50)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, ans := tb.sendEvent(t, body)
			require.Equal(t, http.StatusAccepted, status)
			answers[i] = ans
		}()
	}
	wg.Wait()
	dups := 0
	for _, a := range answers {
		require.Len(t, a.Started, 1)
		require.Equal(t, answers[0].Started, a.Started)
		require.Equal(t, answers[0].ReceivedAt.UnixNano(), a.ReceivedAt.UnixNano())
		if a.Duplicate {
			dups++
		}
	}
	require.Equal(t, 49, dups)
	runs, err := tb.store.RunList(context.Background(), &catalog.RunListParams{Workflow: "orders", Limit: 100})
	require.NoError(t, err)
	require.Len(t, runs, 1)

	status, _ := tb.sendEvent(t, `{"name": "order.created", "id": "evt-1", "data": {"order_id": "o2", "amount": 3}}`)
	require.Equal(t, http.StatusConflict, status)
	status, _ = tb.sendEvent(t, `{"name": "Bad Name", "data": 1}`)
	require.Equal(t, http.StatusUnprocessableEntity, status)
	status, _ = tb.sendEvent(t, `{"name": "x", "data": "a\u0000b"}`)
	require.Equal(t, http.StatusUnprocessableEntity, status)
}

// TestEventBufferedBehindManyOthers: a step that begins to wait takes its buffered
// event even when more than ten thousand other events of the name (other orders'
// payments) arrived before it since its run was created.
func TestEventBufferedBehindManyOthers(t *testing.T) {
	t.Parallel()
	tb := setupEvents(t)
	ctx := context.Background()
	code, started := tb.sendEvent(t, `{"name": "order.created", "data": {"order_id": "o-1", "amount": 5}}`)
	require.Equal(t, http.StatusAccepted, code)
	require.Len(t, started.Started, 1)
	run := started.Started[0].RunID
	_, err := tb.store.DB().ExecContext(ctx, `INSERT INTO received_events (id, name, data, request_hash, actor)
SELECT 'other-' || i, 'payment.succeeded', jsonb_build_object('order_id', 'x-' || i), 'h', 'test'
FROM generate_series(1, 10001) i`)
	require.NoError(t, err)
	code, _ = tb.sendEvent(t, `{"name": "payment.succeeded", "id": "pay-o-1", "data": {"order_id": "o-1"}}`)
	require.Equal(t, http.StatusAccepted, code)
	require.True(t, waitStep(t, tb.store, run), "the step took its payment, behind 10,001 others")
	require.Equal(t, catalog.StepSucceeded, stepOf(t, tb.store, run, "pay").Status)
}
