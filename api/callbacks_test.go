package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
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

// TestCallbackOneUploadAtATime: requests racing on one callback URL
// were all read to the end and stored (3 × 50 MB refused with 409, 191 MB
// written). While one request reads its body, a second one for the same step is a
// 409 callback_not_waiting before a byte of its body is stored, and the first
// completes the step. A request that breaks off gives the callback back: the
// next one completes the step.
func TestCallbackOneUploadAtATime(t *testing.T) {
	t.Parallel()
	tb := setupWith(t, api.Config{InlineLimit: 1024})
	ctx := context.Background()
	key := []byte(limitsSigningKey)
	chunk := bytes.Repeat([]byte("first upload "), 80<<10) // ~1 MiB
	// upload POSTs a body written through a pipe, by the test, to the callback URL.
	type upload struct {
		w      *io.PipeWriter
		status chan int
	}
	start := func(token string) *upload {
		pr, pw := io.Pipe()
		u := &upload{w: pw, status: make(chan int, 1)}
		go func() {
			req, err := http.NewRequest(http.MethodPost, tb.url+"/v1/callbacks/"+token, pr)
			if err != nil {
				u.status <- -1
				return
			}
			req.Header.Set("Content-Type", "application/octet-stream")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				u.status <- 0 // the test broke the upload off
				return
			}
			resp.Body.Close()
			u.status <- resp.StatusCode
		}()
		return u
	}
	// streaming waits until the server is writing an upload into the blob store:
	// it has read past the body's first KiB, so it is reading the body.
	streaming := func() {
		t.Helper()
		require.Eventually(t, func() bool {
			entries, err := os.ReadDir(filepath.Join(tb.blobDir, ".tmp"))
			if err != nil {
				return false
			}
			for _, e := range entries {
				if info, err := e.Info(); err == nil && info.Size() > 0 {
					return true
				}
			}
			return false
		}, 20*time.Second, 10*time.Millisecond, "waiting for the first upload to reach the blob store")
	}

	id, c, _ := tb.claimFirst(t)
	require.NoError(t, tb.store.StepSuspend(ctx, catalog.Lease{RunID: c.RunID, Key: c.Key, Token: c.LeaseToken},
		catalog.Wait{Kind: catalog.WaitCallback}))
	token := functions.CallbackToken(key, id.String(), c.Key, c.Attempt)

	first := start(token)
	for range 4 {
		_, err := first.w.Write(chunk)
		require.NoError(t, err)
	}
	streaming()
	before := tb.blobFiles(t)
	second := tb.sendAs(t, "", http.MethodPost, "/v1/callbacks/"+token,
		map[string]string{"Content-Type": "application/octet-stream"}, bytes.Repeat([]byte("second"), 1<<20))
	require.Equal(t, http.StatusConflict, second.status, "%s", second.body)
	require.Equal(t, "callback_not_waiting", second.problem.Code)
	require.Contains(t, second.problem.Detail, "receiving another callback")
	require.Equal(t, before, tb.blobFiles(t), "the refused body was stored")

	_, err := first.w.Write(chunk)
	require.NoError(t, err)
	require.NoError(t, first.w.Close())
	require.Equal(t, http.StatusOK, <-first.status, "the first upload completes the step")
	a := tb.send(t, http.MethodGet, "/v1/runs/"+id.String()+"/steps/"+c.Key+"/output", nil, nil)
	require.Equal(t, http.StatusOK, a.status)
	require.Equal(t, 5*len(chunk), len(a.body), "the step's output is the first upload")
	require.Greater(t, len(tb.blobFiles(t)), len(before), "the first upload is stored")

	// An upload broken off gives the callback back.
	b, err := tb.store.StepClaim(ctx, "test", 1, time.Minute)
	require.NoError(t, err)
	require.Len(t, b, 1)
	require.NoError(t, tb.store.StepSuspend(ctx, catalog.Lease{RunID: b[0].RunID, Key: b[0].Key, Token: b[0].LeaseToken},
		catalog.Wait{Kind: catalog.WaitCallback}))
	token = functions.CallbackToken(key, id.String(), b[0].Key, b[0].Attempt)
	broken := start(token)
	_, err = broken.w.Write(chunk)
	require.NoError(t, err)
	broken.w.CloseWithError(errors.New("the sender went away"))
	<-broken.status
	// Until the server has seen the upload break off, the next one is refused.
	require.Eventually(t, func() bool {
		a = tb.sendAs(t, "", http.MethodPost, "/v1/callbacks/"+token, map[string]string{"Content-Type": "application/json"}, []byte(`{"retried":true}`))
		return a.status != http.StatusConflict
	}, 20*time.Second, 50*time.Millisecond, "waiting for the broken upload to give the callback back")
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	st, err := tb.store.StepGet(ctx, id, b[0].Key)
	require.NoError(t, err)
	require.JSONEq(t, `{"retried":true}`, string(st.Output))
}
