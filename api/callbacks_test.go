package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/functions"
)

// TestCallback: POST /v1/callbacks/{token} completes a step suspended for its
// attempt's callback, without an API token, with its body as the step's output
// (JSON inline, other bytes a blob) or, with ?outcome=failed, fails it. A forged
// token (another key, an altered MAC, another step, a lease credential) is a 401;
// a reused one (the step no longer waits) and one for another attempt are 409
// callback_not_waiting, and change nothing. A callback that comes while the
// attempt still runs is kept (buffered) and completes the step when it suspends.
func TestCallback(t *testing.T) {
	t.Parallel()
	tb := setupWith(t, api.Config{})
	ctx := context.Background()
	key := []byte(limitsSigningKey)
	// suspend claims the next ready step and suspends it for its callback: its token.
	suspend := func(c catalog.Claimed) string {
		t.Helper()
		require.NoError(t, tb.store.StepSuspend(ctx, catalog.Lease{RunID: c.RunID, Key: c.Key, Token: c.LeaseToken},
			catalog.Wait{Kind: catalog.WaitCallback}))
		return functions.CallbackToken(key, c.RunID.String(), c.Key, c.Attempt)
	}
	claimNext := func() catalog.Claimed {
		t.Helper()
		claimed, err := tb.store.StepClaim(ctx, "test", 1, time.Minute)
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		return claimed[0]
	}
	post := func(token, query, contentType, body string) *answer {
		t.Helper()
		return tb.sendAs(t, "", http.MethodPost, "/v1/callbacks/"+token+query, map[string]string{"Content-Type": contentType}, []byte(body))
	}
	type result struct {
		RunID string `json:"run_id"`
		Step  struct {
			Key       string          `json:"key"`
			Status    string          `json:"status"`
			Output    json.RawMessage `json:"output"`
			LastError json.RawMessage `json:"last_error"`
		} `json:"step"`
	}

	id, c, leaseCred := tb.claimFirst(t)
	token := suspend(c)
	for name, forged := range map[string]string{
		"another key":      functions.CallbackToken([]byte("not-the-servers-key-0123456789"), id.String(), c.Key, c.Attempt),
		"altered MAC":      token[:len(token)-1] + map[bool]string{true: "0", false: "1"}[!strings.HasSuffix(token, "0")],
		"other step":       strings.Replace(token, "."+c.Key+".", ".b.", 1),
		"lease credential": leaseCred,
		"garbage":          "x.y.z",
	} {
		a := post(forged, "", "application/json", `{"paid":1}`)
		require.Equal(t, http.StatusUnauthorized, a.status, "%s: %s", name, a.body)
		require.Equal(t, "unauthorized", a.problem.Code, name)
	}
	a := post(functions.CallbackToken(key, id.String(), c.Key, c.Attempt+1), "", "application/json", `1`)
	require.Equal(t, http.StatusConflict, a.status, "another attempt: %s", a.body)
	require.Equal(t, "callback_not_waiting", a.problem.Code)
	a = post(token, "?outcome=failed", "application/json", `{"code":"x"}`)
	require.Equal(t, http.StatusUnprocessableEntity, a.status, "a failure needs a message: %s", a.body)
	a = post(token, "?outcome=maybe", "application/json", `1`)
	require.Equal(t, http.StatusUnprocessableEntity, a.status, "%s", a.body)

	// A JSON body is the output, as it is.
	a = post(token, "", "application/json", `{"paid":true}`)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	res := decode[result](t, a)
	require.Equal(t, id.String(), res.RunID)
	require.Equal(t, "succeeded", res.Step.Status)
	require.JSONEq(t, `{"paid":true}`, string(res.Step.Output))

	// Reused: the step no longer waits for it.
	a = post(token, "", "application/json", `{"paid":false}`)
	require.Equal(t, http.StatusConflict, a.status, "%s", a.body)
	require.Equal(t, "callback_not_waiting", a.problem.Code)
	st, err := tb.store.StepGet(ctx, id, c.Key)
	require.NoError(t, err)
	require.JSONEq(t, `{"paid":true}`, string(st.Output), "nothing changed")

	// Any other bytes are a blob, and the output is its reference.
	b := claimNext()
	require.Equal(t, "b", b.Key)
	a = post(suspend(b), "", "text/csv", "id,amount\n1,42\n")
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	res = decode[result](t, a)
	require.Equal(t, "succeeded", res.Step.Status)
	require.Contains(t, string(res.Step.Output), `"$blob"`)
	a = tb.send(t, http.MethodGet, "/v1/runs/"+id.String()+"/steps/b/output", nil, nil)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	require.Equal(t, "id,amount\n1,42\n", string(a.body))

	// ?outcome=failed fails the step terminally with the body's error.
	c3 := claimNext()
	require.Equal(t, "c", c3.Key)
	a = post(suspend(c3), "?outcome=failed", "application/json", `{"message":"card declined","code":"declined"}`)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	res = decode[result](t, a)
	require.Equal(t, "failed", res.Step.Status)
	st, err = tb.store.StepGet(ctx, id, "c")
	require.NoError(t, err)
	require.Equal(t, catalog.StepFailed, st.Status)
	require.JSONEq(t, `{"message":"card declined","code":"declined","retryable":false}`, string(st.LastError))
	run, err := tb.store.RunGet(ctx, id)
	require.NoError(t, err)
	require.Equal(t, catalog.RunFailed, run.Status)

	// Before the function answered: kept, and applied when the step suspends.
	id2, d, _ := tb.claimFirst(t)
	early := functions.CallbackToken(key, id2.String(), d.Key, d.Attempt)
	a = post(early, "", "application/json", `{"early":true}`)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	require.Contains(t, string(a.body), `"buffered":true`)
	require.Equal(t, "running", decode[result](t, a).Step.Status)
	a = post(early, "", "application/json", `{"early":"again"}`)
	require.Equal(t, http.StatusConflict, a.status, "kept once: %s", a.body)
	require.Equal(t, "callback_not_waiting", a.problem.Code)
	suspend(d)
	st, err = tb.store.StepGet(ctx, id2, d.Key)
	require.NoError(t, err)
	require.Equal(t, catalog.StepSucceeded, st.Status)
	require.JSONEq(t, `{"early":true}`, string(st.Output))
}
