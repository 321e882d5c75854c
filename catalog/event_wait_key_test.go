package catalog_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
)

// waitVersion registers workflow with one wait_for_event step pay on
// payment.succeeded whose match is match.
func waitVersion(ctx context.Context, t *testing.T, s *catalog.Store, workflow, match string) {
	t.Helper()
	def, err := json.Marshal(map[string]any{"steps": []any{map[string]any{"key": "pay",
		"wait_for_event": map[string]any{"event": "payment.succeeded", "match": match, "on_timeout": "fail"}}}})
	require.NoError(t, err)
	d := fakeDigest(workflow)
	_, _, err = s.VersionRegister(ctx, &catalog.VersionRegisterParams{Workflow: workflow, Digest: d, Size: 1, BlobKey: "k",
		Definition: def, Fingerprint: d, Steps: []catalog.NewStep{{Key: "pay", MaxAttempts: 1}}})
	require.NoError(t, err)
}

// suspendWaits claims every ready step and suspends it as the dispatcher does a
// wait_for_event step, with the match of its run's workflow.
func suspendWaits(ctx context.Context, t *testing.T, s *catalog.Store, matches map[uuid.UUID]string) {
	t.Helper()
	claimed, err := s.StepClaim(ctx, "d1", 64, time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, len(matches))
	for _, c := range claimed {
		took, err := s.EventWaitSuspend(ctx, catalog.Lease{RunID: c.RunID, Key: c.Key, Token: c.LeaseToken},
			catalog.EventWait{Wait: catalog.Wait{Name: "payment.succeeded"}, Match: matches[c.RunID]})
		require.NoError(t, err)
		require.False(t, took)
	}
}

// TestEventWaitKey: a wait whose match is an equality of an event field with the
// run's input records its key as it suspends, and an event finds it by that key;
// the waits without one (a match of another form, an input without the field)
// are compared with every event, and an event without the field is compared
// with every wait, each match failing or holding as it says.
func TestEventWaitKey(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	const keyed, big = "event.data.order_id == input.order_id", "event.data.amount > 100"
	waitVersion(ctx, t, s, "orders", keyed)
	waitVersion(ctx, t, s, "big", big)
	matches := map[uuid.UUID]string{}
	orders := make([]uuid.UUID, 3)
	for i := range orders {
		r, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "orders",
			Input: json.RawMessage(fmt.Sprintf(`{"order_id": "o-%d"}`, i))})
		require.NoError(t, err)
		orders[i], matches[r.ID] = r.ID, keyed
	}
	noField, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "orders", Input: json.RawMessage(`{}`)})
	require.NoError(t, err)
	matches[noField.ID] = keyed
	bigRun, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "big", Input: json.RawMessage(`{}`)})
	require.NoError(t, err)
	matches[bigRun.ID] = big
	suspendWaits(ctx, t, s, matches)

	waitKey := func(run uuid.UUID) sql.NullString {
		var k sql.NullString
		require.NoError(t, s.DB().GetContext(ctx, &k, `SELECT wait_key FROM steps WHERE run_id = $1 AND key = 'pay'`, run))
		return k
	}
	require.Equal(t, sql.NullString{String: `event.data.order_id="o-1"`, Valid: true}, waitKey(orders[1]))
	require.False(t, waitKey(noField.ID).Valid, "its input has no order_id: no key")
	require.False(t, waitKey(bigRun.ID).Valid, "its match is no equality: no key")

	// o-1's payment, of a big amount: its order's wait and the big one's; the
	// run without order_id is compared too, and its match fails (no such key).
	ev, _, err := s.EventIngest(ctx, &catalog.EventIngestParams{Name: "payment.succeeded",
		Data: json.RawMessage(`{"order_id": "o-1", "amount": 500}`), Actor: "test"})
	require.NoError(t, err)
	require.ElementsMatch(t, []catalog.EventResumed{{RunID: orders[1], Step: "pay"}, {RunID: bigRun.ID, Step: "pay"}}, ev.Outcome.Resumed)
	require.Len(t, ev.Outcome.Errors, 1)
	require.Equal(t, noField.ID, *ev.Outcome.Errors[0].RunID)

	// A payment without order_id: compared with every waiting step, as each
	// match says (the orders' fail on it).
	ev, _, err = s.EventIngest(ctx, &catalog.EventIngestParams{Name: "payment.succeeded",
		Data: json.RawMessage(`{"amount": 1}`), Actor: "test"})
	require.NoError(t, err)
	require.Empty(t, ev.Outcome.Resumed)
	require.Len(t, ev.Outcome.Errors, 3, "o-0, o-2 and the run without order_id")

	// A payment whose order_id is a number: 2.0 is CEL's 2, no order's.
	ev, _, err = s.EventIngest(ctx, &catalog.EventIngestParams{Name: "payment.succeeded",
		Data: json.RawMessage(`{"order_id": 2.0}`), Actor: "test"})
	require.NoError(t, err)
	require.Empty(t, ev.Outcome.Resumed)
	ev, _, err = s.EventIngest(ctx, &catalog.EventIngestParams{Name: "payment.succeeded",
		Data: json.RawMessage(`{"order_id": "o-2"}`), Actor: "test"})
	require.NoError(t, err)
	require.Equal(t, []catalog.EventResumed{{RunID: orders[2], Step: "pay"}}, ev.Outcome.Resumed)
	require.Len(t, ev.Outcome.Errors, 1, "the run without order_id, compared with every event")
}
