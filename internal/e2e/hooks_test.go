package e2e

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/client"
	"github.com/cairnrun/cairn/secrets"
)

const adminToken = "e2e-admin-token-0123456789"

// TestGitHubWebhook is webhooks (docs/webhooks.md) through a real `cairn
// serve`: a workflow with a github hook is deployed and its secret set with the
// CLI; a GitHub-style push delivery (X-Hub-Signature-256 over the raw body,
// X-GitHub-Delivery) starts a run with the mapped input, answered 202 with its id;
// the same delivery again answers the same run; one with a bad signature is a 401
// and starts nothing.
func TestGitHubWebhook(t *testing.T) {
	t.Parallel()
	st := newStack(t, stackOptions{})
	s := st.start(serverOptions{env: []string{
		"CAIRN_TOKENS=operator:" + operatorToken + ",viewer:" + viewerToken + ",admin:" + adminToken,
		"CAIRN_SECRET_KEY=" + secrets.GenerateKey(),
	}})
	c := s.api()

	dir := writeTree(t, map[string]string{"cairn.yaml": `name: ci
steps:
  - {key: build, builtin: echo}
hooks:
  - name: github
    secret: github-hook
    signature: github
    input: '{"repo": body.repository.full_name, "ref": body.ref, "event": headers["x-github-event"]}'
    idempotency_key: 'headers["x-github-delivery"]'
`})
	require.Contains(t, s.cli("deploy", dir), "version:  1")
	const secret = "It's a Secret to Everybody"
	file := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(file, []byte(secret), 0o600))
	require.Equal(t, "secret github-hook: version 1\n", s.cli("secret", "set", "github-hook", "--from-file", file, "--token", adminToken))

	body := []byte(`{"ref": "refs/heads/main", "repository": {"full_name": "cairnrun/cairn"}, "pusher": {"name": "octocat"}}`)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	goodSig := "sha256=" + hex.EncodeToString(mac.Sum(nil))
	deliver := func(sig, delivery string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, s.url+"/v1/hooks/ci/github", bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("User-Agent", "GitHub-Hookshot/e2e")
		req.Header.Set("X-GitHub-Event", "push")
		req.Header.Set("X-GitHub-Delivery", delivery)
		req.Header.Set("X-Hub-Signature-256", sig)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, out
	}

	status, out := deliver(goodSig, "a1b2c3d4-0001")
	require.Equal(t, http.StatusAccepted, status, "%s", out)
	var first struct {
		RunID  string `json:"run_id"`
		Replay bool   `json:"replay"`
	}
	require.NoError(t, json.Unmarshal(out, &first))
	require.False(t, first.Replay)

	run := c.waitRun(first.RunID, time.Minute)
	require.Equal(t, client.RunStatusSucceeded, run.Status)
	require.JSONEq(t, `{"repo": "cairnrun/cairn", "ref": "refs/heads/main", "event": "push"}`, string(mustJSON(t, run.Input)))
	require.Equal(t, map[string]string{"hook": "github"}, run.Labels)

	// GitHub's "Redeliver": the same delivery ID, the same run.
	status, out = deliver(goodSig, "a1b2c3d4-0001")
	require.Equal(t, http.StatusAccepted, status, "%s", out)
	var again struct {
		RunID  string `json:"run_id"`
		Replay bool   `json:"replay"`
	}
	require.NoError(t, json.Unmarshal(out, &again))
	require.Equal(t, first.RunID, again.RunID)
	require.True(t, again.Replay)

	// A forged delivery: 401, nothing started.
	status, out = deliver("sha256="+hex.EncodeToString(make([]byte, 32)), "a1b2c3d4-0002")
	require.Equal(t, http.StatusUnauthorized, status, "%s", out)
	ctx, cancel := withTimeout(time.Minute)
	defer cancel()
	workflow, n := "ci", 0
	for _, err := range c.cl.Runs(ctx, &client.ListRunsParams{Workflow: &workflow}) {
		require.NoError(t, err)
		n++
	}
	require.Equal(t, 1, n, "only the genuine delivery started a run")
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}
