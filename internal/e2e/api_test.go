package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/bundle"
)

// The API's shapes, as far as the tests read them (DESIGN §6).
type (
	apiRun struct {
		ID         string          `json:"id"`
		Workflow   string          `json:"workflow"`
		Version    int             `json:"version"`
		Status     string          `json:"status"`
		Error      json.RawMessage `json:"error"`
		CreatedAt  time.Time       `json:"created_at"`
		StartedAt  *time.Time      `json:"started_at"`
		FinishedAt *time.Time      `json:"finished_at"`
	}
	apiStep struct {
		Key         string          `json:"key"`
		Status      string          `json:"status"`
		Attempts    int             `json:"attempts"`
		MaxAttempts int             `json:"max_attempts"`
		LeaseOwner  *string         `json:"lease_owner"`
		LastError   json.RawMessage `json:"last_error"`
		Output      json.RawMessage `json:"output"`
		Checkpoint  json.RawMessage `json:"checkpoint"`
	}
	apiAttempt struct {
		Number     int           `json:"number"`
		Status     string        `json:"status"`
		Dispatcher string        `json:"dispatcher"`
		LeaseToken int64         `json:"lease_token"`
		Counted    bool          `json:"counted"`
		Error      *attemptError `json:"error"`
		StartedAt  time.Time     `json:"started_at"`
		FinishedAt *time.Time    `json:"finished_at"`
	}
	attemptError struct {
		Message   string `json:"message"`
		Code      string `json:"code"`
		Retryable bool   `json:"retryable"`
	}
	apiEvent struct {
		Seq     int64           `json:"seq"`
		Type    string          `json:"type"`
		Step    string          `json:"step"`
		Attempt int             `json:"attempt"`
		Data    json.RawMessage `json:"data"`
	}
	uploadResult struct {
		Workflow string `json:"workflow"`
		Version  int    `json:"version"`
		Digest   string `json:"digest"`
	}
	// blobRef is the body of a {"$blob": …} reference.
	blobRef struct {
		Digest string `json:"digest"`
		Size   int64  `json:"size"`
	}
)

func isTerminalRun(status string) bool {
	return status == "succeeded" || status == "failed" || status == "canceled"
}

// apiClient talks to one server's API with plain net/http.
type apiClient struct {
	t     *testing.T
	base  string
	token string
}

var httpClient = &http.Client{Timeout: 30 * time.Second}

// do sends a request and returns the response (the caller closes its body).
func (c *apiClient) do(ctx context.Context, method, path string, body io.Reader, header http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if req.Header.Get("Authorization") == "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return httpClient.Do(req)
}

// getJSON decodes the 200 answer of GET path into v; any other answer is an error.
func (c *apiClient) getJSON(path string, v any) error {
	ctx, cancel := withTimeout(10 * time.Second)
	defer cancel()
	resp, err := c.do(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	return json.Unmarshal(b, v)
}

// sendJSON sends body as JSON and returns the status and the answer's bytes.
func (c *apiClient) sendJSON(method, path string, body any, header http.Header) (int, []byte) {
	c.t.Helper()
	b, err := json.Marshal(body)
	require.NoError(c.t, err)
	if header == nil {
		header = http.Header{}
	}
	header.Set("Content-Type", "application/json")
	ctx, cancel := withTimeout(30 * time.Second)
	defer cancel()
	resp, err := c.do(ctx, method, path, bytes.NewReader(b), header)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	return resp.StatusCode, out
}

// deploy writes files (path → content; paths under bin/ are executable) into a new
// folder, packs it into a bundle and uploads it.
func (c *apiClient) deploy(files map[string]string) uploadResult {
	c.t.Helper()
	dir := writeTree(c.t, files)
	var buf bytes.Buffer
	_, err := bundle.Pack(context.Background(), dir, &buf)
	require.NoError(c.t, err)
	ctx, cancel := withTimeout(30 * time.Second)
	defer cancel()
	resp, err := c.do(ctx, http.MethodPost, "/v1/bundles", &buf, http.Header{"Content-Type": {"application/gzip"}})
	require.NoError(c.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	require.Contains(c.t, []int{http.StatusCreated, http.StatusOK}, resp.StatusCode, "upload bundle: %s", b)
	var res uploadResult
	require.NoError(c.t, json.Unmarshal(b, &res))
	return res
}

// writeTree writes files into a new temporary folder and returns it.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for p, content := range files {
		full := filepath.Join(dir, p)
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		mode := os.FileMode(0o644)
		if strings.HasPrefix(p, "bin/") {
			mode = 0o755
		}
		require.NoError(t, os.WriteFile(full, []byte(content), mode))
	}
	return dir
}

// startRun starts a run of workflow (version 0: the latest) and returns its ID.
func (c *apiClient) startRun(workflow string, version int, input any) string {
	c.t.Helper()
	id, err := c.tryStartRun(workflow, version, input)
	require.NoError(c.t, err)
	return id
}

// tryStartRun is startRun for goroutines: it returns what went wrong.
func (c *apiClient) tryStartRun(workflow string, version int, input any) (string, error) {
	body := map[string]any{}
	if version > 0 {
		body["version"] = version
	}
	if input != nil {
		body["input"] = input
	}
	b, err := json.Marshal(body)
	if err != nil {
		return "", err
	}
	ctx, cancel := withTimeout(30 * time.Second)
	defer cancel()
	resp, err := c.do(ctx, http.MethodPost, "/v1/workflows/"+workflow+"/runs", bytes.NewReader(b),
		http.Header{"Content-Type": {"application/json"}})
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err = io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusAccepted {
		return "", fmt.Errorf("start run of %s: %d %s", workflow, resp.StatusCode, b)
	}
	var run apiRun
	if err := json.Unmarshal(b, &run); err != nil {
		return "", err
	}
	return run.ID, nil
}

// countRuns counts the runs of workflow in status, page by page.
func (c *apiClient) countRuns(workflow, status string) (int, error) {
	n, cursor := 0, ""
	for {
		q := url.Values{"workflow": {workflow}, "status": {status}, "limit": {"1000"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page struct {
			Items      []apiRun `json:"items"`
			NextCursor string   `json:"next_cursor"`
		}
		if err := c.getJSON("/v1/runs?"+q.Encode(), &page); err != nil {
			return 0, err
		}
		n += len(page.Items)
		if page.NextCursor == "" {
			return n, nil
		}
		cursor = page.NextCursor
	}
}

func (c *apiClient) run(id string) (apiRun, error) {
	var run apiRun
	err := c.getJSON("/v1/runs/"+id, &run)
	return run, err
}

func (c *apiClient) steps(id string) ([]apiStep, error) {
	var out struct{ Items []apiStep }
	err := c.getJSON("/v1/runs/"+id+"/steps", &out)
	return out.Items, err
}

// step returns one step of a run.
func (c *apiClient) step(id, key string) (apiStep, error) {
	steps, err := c.steps(id)
	if err != nil {
		return apiStep{}, err
	}
	for _, s := range steps {
		if s.Key == key {
			return s, nil
		}
	}
	return apiStep{}, fmt.Errorf("run %s has no step %s", id, key)
}

func (c *apiClient) attempts(id, key string) ([]apiAttempt, error) {
	var out struct{ Items []apiAttempt }
	err := c.getJSON("/v1/runs/"+id+"/steps/"+key+"/attempts", &out)
	return out.Items, err
}

// mustSteps, mustStep and mustAttempts fail the test when the API does not answer.
func (c *apiClient) mustSteps(id string) []apiStep {
	c.t.Helper()
	steps, err := c.steps(id)
	require.NoError(c.t, err)
	return steps
}

func (c *apiClient) mustStep(id, key string) apiStep {
	c.t.Helper()
	s, err := c.step(id, key)
	require.NoError(c.t, err)
	return s
}

func (c *apiClient) mustAttempts(id, key string) []apiAttempt {
	c.t.Helper()
	a, err := c.attempts(id, key)
	require.NoError(c.t, err)
	return a
}

// events returns a run's whole history, page by page.
func (c *apiClient) events(id string) []apiEvent {
	c.t.Helper()
	var all []apiEvent
	cursor := ""
	for {
		path := "/v1/runs/" + id + "/events?limit=1000"
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		var page struct {
			Items      []apiEvent `json:"items"`
			NextCursor string     `json:"next_cursor"`
		}
		require.NoError(c.t, c.getJSON(path, &page))
		all = append(all, page.Items...)
		if page.NextCursor == "" {
			return all
		}
		cursor = page.NextCursor
	}
}

// waitRun polls the run until it is terminal and returns it. On timeout it fails
// the test with the run's steps.
func (c *apiClient) waitRun(id string, timeout time.Duration) apiRun {
	c.t.Helper()
	var run apiRun
	// Wait for the run to reach succeeded, failed or canceled.
	ok := assert.EventuallyWithT(c.t, func(ct *assert.CollectT) {
		r, err := c.run(id)
		require.NoError(ct, err)
		run = r
		assert.True(ct, isTerminalRun(r.Status), "run %s is %s", id, r.Status)
	}, timeout, 100*time.Millisecond, "run %s did not finish within %s", id, timeout)
	if !ok {
		steps, err := c.steps(id)
		c.t.Fatalf("run %s: steps %+v (%v)", id, steps, err)
	}
	return run
}

// waitStep polls a step until cond holds for it and returns it.
func (c *apiClient) waitStep(id, key string, timeout time.Duration, what string, cond func(apiStep) bool) apiStep {
	c.t.Helper()
	var st apiStep
	require.EventuallyWithT(c.t, func(ct *assert.CollectT) {
		s, err := c.step(id, key)
		require.NoError(ct, err)
		st = s
		assert.True(ct, cond(s), "step %s of run %s is %s", key, id, s.Status)
	}, timeout, 20*time.Millisecond, "step %s of run %s: %s", key, id, what)
	return st
}

// output downloads a step's output and returns its bytes.
func (c *apiClient) output(id, key string) []byte {
	c.t.Helper()
	return c.download("/v1/runs/" + id + "/steps/" + key + "/output")
}

// logs downloads the log (stderr) of an attempt of a step.
func (c *apiClient) logs(id, key string, attempt int) string {
	c.t.Helper()
	return string(c.download("/v1/runs/" + id + "/steps/" + key + "/logs?attempt=" + strconv.Itoa(attempt)))
}

// download GETs path and returns its 200 body.
func (c *apiClient) download(path string) []byte {
	c.t.Helper()
	ctx, cancel := withTimeout(time.Minute)
	defer cancel()
	resp, err := c.do(ctx, http.MethodGet, path, nil, nil)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	require.Equal(c.t, http.StatusOK, resp.StatusCode, "GET %s: %s", path, b)
	return b
}

// attemptStatuses lists the statuses of attempts in order.
func attemptStatuses(as []apiAttempt) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.Status
	}
	return out
}

// parseBlobRef returns the reference of a stored {"$blob": …} value.
func parseBlobRef(v json.RawMessage) (blobRef, bool) {
	var w struct {
		Blob *blobRef `json:"$blob"`
	}
	if t := bytes.TrimSpace(v); len(t) == 0 || t[0] != '{' || json.Unmarshal(t, &w) != nil || w.Blob == nil {
		return blobRef{}, false
	}
	return *w.Blob, true
}
