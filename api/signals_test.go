package api_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/internal/testenv"
)

// signalManifest has two signal steps: paid (then ship), and doc for large payloads.
const signalManifest = `name: orders
steps:
  - {key: paid, signal: {name: paid}}
  - {key: ship, needs: [paid], builtin: echo}
  - {key: doc, signal: {name: doc}}
`

// setupSignals serves a catalog with a version of signalManifest on the real blob
// store (S3), and returns a run of it.
func setupSignals(t *testing.T) (*testBundle, uuid.UUID) {
	t.Helper()
	ctx := context.Background()
	store := catalog.New(testenv.DB(t), nil)
	tokens, err := api.ParseTokens("operator:alice:" + operatorToken)
	require.NoError(t, err)
	hs := httptest.NewServer(api.New(store, testenv.Blobs(t), &api.Config{Tokens: tokens, TempDir: t.TempDir()}).Handler())
	t.Cleanup(hs.Close)

	m, err := bundle.ParseManifest([]byte(signalManifest))
	require.NoError(t, err)
	def, err := m.Normalize()
	require.NoError(t, err)
	canonical, err := def.CanonicalJSON()
	require.NoError(t, err)
	var steps []catalog.NewStep
	for _, s := range def.Steps {
		steps = append(steps, catalog.NewStep{Key: s.Key, Needs: s.Needs, MaxAttempts: s.Retry.MaxAttempts})
	}
	digest := "sha256:" + fakeHex("orders")
	v, _, err := store.VersionRegister(ctx, &catalog.VersionRegisterParams{Workflow: "orders", Digest: digest, Size: 1,
		BlobKey: "bundles/x", Definition: canonical, Fingerprint: digest, Steps: steps})
	require.NoError(t, err)
	run, _, err := store.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "orders", Version: v.Version})
	require.NoError(t, err)
	return &testBundle{store: store, url: hs.URL}, run.ID
}

func fakeHex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// signal posts a signal and decodes the answer.
func (tb *testBundle) signal(t *testing.T, id uuid.UUID, name, contentType string, body io.Reader, key string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, tb.url+"/v1/runs/"+id.String()+"/signals/"+name, body)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+operatorToken)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return resp.StatusCode, out
}

// suspendSignal claims the run's ready steps and suspends those named in keys as
// signal waits (what a dispatcher does).
func suspendSignal(t *testing.T, store *catalog.Store, keys map[string]string) {
	t.Helper()
	ctx := context.Background()
	claimed, err := store.StepClaim(ctx, "test", 10, time.Minute)
	require.NoError(t, err)
	for _, c := range claimed {
		if name, ok := keys[c.Key]; ok {
			require.NoError(t, store.StepSuspend(ctx, catalog.Lease{RunID: c.RunID, Key: c.Key, Token: c.LeaseToken},
				catalog.Wait{Kind: catalog.WaitSignal, Name: name}))
		}
	}
}

func TestSignalAPI(t *testing.T) {
	t.Parallel()
	tb, id := setupSignals(t)
	ctx := context.Background()

	// Before the step waits: buffered; the repeat is applied once.
	status, out := tb.signal(t, id, "paid", "application/json", bytes.NewBufferString(`{"amount":5}`), "pay-1")
	require.Equal(t, http.StatusOK, status, out)
	require.Equal(t, true, out["buffered"])
	status, again := tb.signal(t, id, "paid", "application/json", bytes.NewBufferString(`{"amount": 5}`), "pay-1")
	require.Equal(t, http.StatusOK, status, again)
	require.Equal(t, true, again["duplicate"])
	require.Equal(t, out["seq"], again["seq"])

	// Unknown name: 404; bad JSON: 400.
	status, prob := tb.signal(t, id, "nope", "application/json", bytes.NewBufferString(`{}`), "")
	require.Equal(t, http.StatusNotFound, status, prob)
	status, prob = tb.signal(t, id, "doc", "application/json", bytes.NewBufferString(`{`), "")
	require.Equal(t, http.StatusBadRequest, status, prob)

	// The step takes the buffered signal when it waits.
	suspendSignal(t, tb.store, map[string]string{"paid": "paid", "doc": "doc"})
	st, err := tb.store.StepGet(ctx, id, "paid")
	require.NoError(t, err)
	require.Equal(t, catalog.StepSucceeded, st.Status)
	require.JSONEq(t, `{"amount":5}`, string(st.Output))

	// The steps list says what doc waits for.
	req, _ := http.NewRequest(http.MethodGet, tb.url+"/v1/runs/"+id.String()+"/steps", nil)
	req.Header.Set("Authorization", "Bearer "+operatorToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	var list struct {
		Items []api.Step `json:"items"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&list))
	resp.Body.Close()
	for _, s := range list.Items {
		if s.Key == "doc" {
			require.Equal(t, "suspended", s.Status)
			require.NotNil(t, s.WaitingFor)
			require.Equal(t, "signal", s.WaitingFor.Kind)
			require.Equal(t, "doc", s.WaitingFor.Name)
			require.NotNil(t, s.WaitingFor.Since)
		}
	}

	// During the wait: 50 MiB of bytes round-trip as the step's output.
	const size = 50 << 20
	payload := make([]byte, size)
	_, _ = rand.Read(payload)
	status, out = tb.signal(t, id, "doc", "application/octet-stream", bytes.NewReader(payload), "doc-1")
	require.Equal(t, http.StatusOK, status, out)
	require.Equal(t, "doc", out["step"])
	require.Equal(t, false, out["buffered"])
	st, err = tb.store.StepGet(ctx, id, "doc")
	require.NoError(t, err)
	require.Equal(t, catalog.StepSucceeded, st.Status)
	require.Contains(t, string(st.Output), `"$blob"`)
	req, _ = http.NewRequest(http.MethodGet, tb.url+"/v1/runs/"+id.String()+"/steps/doc/output", nil)
	req.Header.Set("Authorization", "Bearer "+operatorToken)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	require.NoError(t, err)
	require.EqualValues(t, size, n)
	want := sha256.Sum256(payload)
	require.Equal(t, want[:], h.Sum(nil), "the step's output is the signal's bytes")

	// A finished run: 409 run_finished.
	require.NoError(t, tb.store.RunCancel(ctx, id, "done"))
	status, prob = tb.signal(t, id, "doc", "application/json", bytes.NewBufferString(`1`), "")
	require.Equal(t, http.StatusConflict, status, prob)
	require.Equal(t, "run_finished", prob["code"])
}

// TestSignalKeyReusedWithOtherPayload: the same Idempotency-Key with another payload
// is a 409 idempotency_key_reused, as for starting a run, and the first signal
// stands; with the same payload (JSON or bytes) it is the same signal.
func TestSignalKeyReusedWithOtherPayload(t *testing.T) {
	t.Parallel()
	tb, id := setupSignals(t)
	ctx := context.Background()

	status, first := tb.signal(t, id, "paid", "application/json", bytes.NewBufferString(`{"amount":5}`), "pay-1")
	require.Equal(t, http.StatusOK, status, first)
	status, prob := tb.signal(t, id, "paid", "application/json", bytes.NewBufferString(`{"amount":6}`), "pay-1")
	require.Equal(t, http.StatusConflict, status, prob)
	require.Equal(t, "idempotency_key_reused", prob["code"])
	require.Contains(t, prob["detail"], "pay-1")
	// The same JSON, spelled otherwise, is the same signal.
	status, again := tb.signal(t, id, "paid", "application/json", bytes.NewBufferString(`{ "amount": 5 }`), "pay-1")
	require.Equal(t, http.StatusOK, status, again)
	require.Equal(t, true, again["duplicate"])
	require.Equal(t, first["seq"], again["seq"])
	// The key belongs to the signal's name: under another name it is a new signal.
	status, other := tb.signal(t, id, "doc", "application/json", bytes.NewBufferString(`{"amount":6}`), "pay-1")
	require.Equal(t, http.StatusOK, status, other)
	require.Equal(t, false, other["duplicate"])

	// Bytes (a blob payload): the same bytes are the same signal, others a 409.
	status, blob := tb.signal(t, id, "paid", "application/octet-stream", bytes.NewBufferString("receipt A"), "pay-2")
	require.Equal(t, http.StatusOK, status, blob)
	status, again = tb.signal(t, id, "paid", "application/octet-stream", bytes.NewBufferString("receipt A"), "pay-2")
	require.Equal(t, http.StatusOK, status, again)
	require.Equal(t, true, again["duplicate"])
	status, prob = tb.signal(t, id, "paid", "application/octet-stream", bytes.NewBufferString("receipt B"), "pay-2")
	require.Equal(t, http.StatusConflict, status, prob)
	require.Equal(t, "idempotency_key_reused", prob["code"])

	// The step takes the first payload sent under pay-1.
	suspendSignal(t, tb.store, map[string]string{"paid": "paid"})
	st, err := tb.store.StepGet(ctx, id, "paid")
	require.NoError(t, err)
	require.JSONEq(t, `{"amount":5}`, string(st.Output))

	// After the run has ended, a repeat (a client whose answer was lost) is still
	// the same signal, and another payload still a 409 idempotency_key_reused.
	require.NoError(t, tb.store.RunCancel(ctx, id, "done"))
	status, again = tb.signal(t, id, "paid", "application/json", bytes.NewBufferString(`{"amount":5}`), "pay-1")
	require.Equal(t, http.StatusOK, status, again)
	require.Equal(t, true, again["duplicate"])
	require.Equal(t, first["seq"], again["seq"])
	status, prob = tb.signal(t, id, "paid", "application/json", bytes.NewBufferString(`{"amount":7}`), "pay-1")
	require.Equal(t, http.StatusConflict, status, prob)
	require.Equal(t, "idempotency_key_reused", prob["code"])
	status, prob = tb.signal(t, id, "paid", "application/json", bytes.NewBufferString(`{"amount":7}`), "pay-3")
	require.Equal(t, http.StatusConflict, status, prob)
	require.Equal(t, "run_finished", prob["code"])
}
