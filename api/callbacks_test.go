package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/functions"
)

// TestCallback: POST /v1/callbacks/{token} completes a step suspended for its
// attempt's callback, without an API token. A forged token (another key, an
// altered MAC, a lease credential) is a 401; a reused one (the step no longer
// waits) and one for another attempt are 409s; the body needs exactly one of
// output and error.
func TestCallback(t *testing.T) {
	t.Parallel()
	tb := setupWith(t, api.Config{})
	ctx := context.Background()
	id, c, leaseCred := tb.claimFirst(t)
	require.NoError(t, tb.store.StepSuspend(ctx, catalog.Lease{RunID: id, Key: c.Key, Token: c.LeaseToken},
		catalog.Wait{Kind: catalog.WaitCallback}))
	key := []byte(limitsSigningKey)
	token := functions.CallbackToken(key, id.String(), c.Key, c.Attempt)
	post := func(token, body string) *answer {
		t.Helper()
		return tb.sendAs(t, "", http.MethodPost, "/v1/callbacks/"+token, nil, []byte(body))
	}

	for name, forged := range map[string]string{
		"another key":      functions.CallbackToken([]byte("not-the-servers-key-0123456789"), id.String(), c.Key, c.Attempt),
		"altered MAC":      token[:len(token)-1] + map[bool]string{true: "0", false: "1"}[!strings.HasSuffix(token, "0")],
		"other step":       strings.Replace(token, "."+c.Key+".", ".b.", 1),
		"lease credential": leaseCred,
		"garbage":          "x.y.z",
	} {
		a := post(forged, `{"output":1}`)
		require.Equal(t, http.StatusUnauthorized, a.status, "%s: %s", name, a.body)
		require.Equal(t, "unauthorized", a.problem.Code)
	}
	a := post(token, `{"output":{"paid":true},"error":{"message":"x"}}`)
	require.Equal(t, http.StatusUnprocessableEntity, a.status, "%s", a.body)
	a = post(token, `{}`)
	require.Equal(t, http.StatusUnprocessableEntity, a.status, "%s", a.body)
	other := functions.CallbackToken(key, id.String(), c.Key, c.Attempt+1)
	a = post(other, `{"output":1}`)
	require.Equal(t, http.StatusConflict, a.status, "%s", a.body)

	a = post(token, `{"output":{"paid":true}}`)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	res := decode[struct {
		RunID string `json:"run_id"`
		Step  struct {
			Status string          `json:"status"`
			Output json.RawMessage `json:"output"`
		} `json:"step"`
	}](t, a)
	require.Equal(t, id.String(), res.RunID)
	require.Equal(t, "succeeded", res.Step.Status)
	require.JSONEq(t, `{"paid":true}`, string(res.Step.Output))

	// Reused: the step no longer waits for it.
	a = post(token, `{"output":{"paid":false}}`)
	require.Equal(t, http.StatusConflict, a.status, "%s", a.body)
	require.Equal(t, "invalid_run_state", a.problem.Code)
	st, err := tb.store.StepGet(ctx, id, c.Key)
	require.NoError(t, err)
	require.JSONEq(t, `{"paid":true}`, string(st.Output), "nothing changed")

	// An error fails the step terminally.
	claimed, err := tb.store.StepClaim(ctx, "test", 1, 60e9)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	b := claimed[0]
	require.NoError(t, tb.store.StepSuspend(ctx, catalog.Lease{RunID: b.RunID, Key: b.Key, Token: b.LeaseToken},
		catalog.Wait{Kind: catalog.WaitCallback}))
	a = post(functions.CallbackToken(key, b.RunID.String(), b.Key, b.Attempt), `{"error":{"message":"card declined","code":"declined"}}`)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	st, err = tb.store.StepGet(ctx, b.RunID, b.Key)
	require.NoError(t, err)
	require.Equal(t, catalog.StepFailed, st.Status)
	require.JSONEq(t, `{"message":"card declined","code":"declined"}`, string(st.LastError))
}
