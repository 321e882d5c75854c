package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/client"
)

// apiClient is one server's API for a test: the generated client (package client,
// with the operator's token) and helpers that fail the test when the API does not
// answer. Run IDs are strings, as the API's shapes have them.
type apiClient struct {
	t  *testing.T
	cl *client.Client
}

// in returns the client failing t, a subtest's, rather than the test that made it:
// a subtest that fails its parent's t ends without saying why.
func (c *apiClient) in(t *testing.T) *apiClient {
	return &apiClient{t: t, cl: c.cl}
}

// newAPIClient returns a client of the API at base with the operator's token.
func newAPIClient(t *testing.T, base string) *apiClient {
	cl, err := client.New(base, operatorToken)
	require.NoError(t, err)
	return &apiClient{t: t, cl: cl}
}

// apiError is the error object of a run, a step or an attempt (a free-form JSON
// value in the API's description).
type apiError struct {
	Message   string `json:"message"`
	Code      string `json:"code"`
	Retryable bool   `json:"retryable"`
}

// errorOf decodes an error object; the zero apiError for none.
func errorOf(v any) apiError {
	var e apiError
	_ = json.Unmarshal(jsonOf(v), &e) // null and non-objects leave it zero
	return e
}

// jsonOf encodes a free-form JSON value of the generated types (an output, a
// checkpoint, an error, an event's data) back to JSON; nil is null.
func jsonOf(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("a decoded JSON value does not encode: %v", err)) // cannot happen
	}
	return b
}

// deref is *p, or the zero value for nil.
func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// runID parses a run ID the API gave; it fails the test when it is not one.
func (c *apiClient) runID(id string) uuid.UUID {
	c.t.Helper()
	u, err := parseRunID(id)
	require.NoError(c.t, err)
	return u
}

// parseRunID is runID for helpers that return errors (they may run in an
// EventuallyWithT condition, off the test's goroutine).
func parseRunID(id string) (uuid.UUID, error) {
	u, err := uuid.Parse(id)
	if err != nil {
		return uuid.Nil, fmt.Errorf("run ID %q: %w", id, err)
	}
	return u, nil
}

// deploy writes files (path → content; paths under bin/ are executable) into a new
// folder, packs it into a bundle and uploads it.
func (c *apiClient) deploy(files map[string]string) *client.UploadResult {
	c.t.Helper()
	dir := writeTree(c.t, files)
	var buf bytes.Buffer
	_, err := bundle.Pack(context.Background(), dir, &buf)
	require.NoError(c.t, err)
	ctx, cancel := withTimeout(30 * time.Second)
	defer cancel()
	res, err := c.cl.UploadBundle(ctx, &buf)
	require.NoError(c.t, err)
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
	body := client.StartRunBody{Input: input}
	if version > 0 {
		v := int64(version)
		body.Version = &v
	}
	ctx, cancel := withTimeout(30 * time.Second)
	defer cancel()
	run, err := c.cl.CreateRun(ctx, workflow, body, "")
	if err != nil {
		return "", err
	}
	return run.Id, nil
}

// countRuns counts the runs of workflow in status, page by page.
func (c *apiClient) countRuns(workflow string, status client.RunStatus) (int, error) {
	ctx, cancel := withTimeout(time.Minute)
	defer cancel()
	st, limit := client.ListRunsParamsStatus(status), int64(1000)
	n := 0
	for _, err := range c.cl.Runs(ctx, &client.ListRunsParams{Workflow: &workflow, Status: &st, Limit: &limit}) {
		if err != nil {
			return 0, err
		}
		n++
	}
	return n, nil
}

func (c *apiClient) run(id string) (client.Run, error) {
	ctx, cancel := withTimeout(10 * time.Second)
	defer cancel()
	uid, err := parseRunID(id)
	if err != nil {
		return client.Run{}, err
	}
	resp, err := c.cl.GetRunWithResponse(ctx, uid)
	if err != nil {
		return client.Run{}, err
	}
	if resp.JSON200 == nil {
		return client.Run{}, fmt.Errorf("get run %s: status %d", id, resp.StatusCode())
	}
	return *resp.JSON200, nil
}

func (c *apiClient) steps(id string) ([]client.Step, error) {
	ctx, cancel := withTimeout(10 * time.Second)
	defer cancel()
	uid, err := parseRunID(id)
	if err != nil {
		return nil, err
	}
	resp, err := c.cl.ListStepsWithResponse(ctx, uid)
	if err != nil {
		return nil, err
	}
	if resp.JSON200 == nil {
		return nil, fmt.Errorf("list steps of %s: status %d", id, resp.StatusCode())
	}
	return deref(resp.JSON200.Items), nil
}

// step returns one step of a run.
func (c *apiClient) step(id, key string) (client.Step, error) {
	steps, err := c.steps(id)
	if err != nil {
		return client.Step{}, err
	}
	for _, s := range steps {
		if s.Key == key {
			return s, nil
		}
	}
	return client.Step{}, fmt.Errorf("run %s has no step %s", id, key)
}

func (c *apiClient) attempts(id, key string) ([]client.Attempt, error) {
	ctx, cancel := withTimeout(10 * time.Second)
	defer cancel()
	uid, err := parseRunID(id)
	if err != nil {
		return nil, err
	}
	resp, err := c.cl.ListAttemptsWithResponse(ctx, uid, key)
	if err != nil {
		return nil, err
	}
	if resp.JSON200 == nil {
		return nil, fmt.Errorf("list attempts of %s/%s: status %d", id, key, resp.StatusCode())
	}
	return deref(resp.JSON200.Items), nil
}

// mustSteps, mustStep and mustAttempts fail the test when the API does not answer.
func (c *apiClient) mustSteps(id string) []client.Step {
	c.t.Helper()
	steps, err := c.steps(id)
	require.NoError(c.t, err)
	return steps
}

func (c *apiClient) mustStep(id, key string) client.Step {
	c.t.Helper()
	s, err := c.step(id, key)
	require.NoError(c.t, err)
	return s
}

func (c *apiClient) mustAttempts(id, key string) []client.Attempt {
	c.t.Helper()
	a, err := c.attempts(id, key)
	require.NoError(c.t, err)
	return a
}

// events returns a run's whole history, page by page.
func (c *apiClient) events(id string) []client.Event {
	c.t.Helper()
	all, err := c.tryEvents(id)
	require.NoError(c.t, err)
	return all
}

// tryEvents is events for goroutines: it returns what went wrong.
func (c *apiClient) tryEvents(id string) ([]client.Event, error) {
	uid, err := parseRunID(id)
	if err != nil {
		return nil, err
	}
	ctx, cancel := withTimeout(time.Minute)
	defer cancel()
	limit := int64(1000)
	var all []client.Event
	for e, err := range c.cl.Events(ctx, uid, &client.ListEventsParams{Limit: &limit}) {
		if err != nil {
			return nil, fmt.Errorf("events of run %s: %w", id, err)
		}
		all = append(all, e)
	}
	return all, nil
}

// waitRun waits until the run has ended (client.WaitRun: it follows the run's
// events) and returns it. Reads that fail (a server killed, a database down) are
// tried again until the timeout; on timeout it fails the test with the run's steps.
func (c *apiClient) waitRun(id string, timeout time.Duration) client.Run {
	c.t.Helper()
	ctx, cancel := withTimeout(timeout)
	defer cancel()
	run, err := c.cl.WaitRun(ctx, c.runID(id), client.WaitOptions{
		PollInterval: 100 * time.Millisecond,
		Follow:       client.FollowOptions{MaxFailures: math.MaxInt32},
	})
	if err != nil {
		steps, serr := c.steps(id)
		c.t.Fatalf("run %s did not finish within %s: %v\nsteps: %s (%v)", id, timeout, err, jsonOf(steps), serr)
	}
	return *run
}

// waitStep polls a step until cond holds for it and returns it.
func (c *apiClient) waitStep(id, key string, timeout time.Duration, what string, cond func(client.Step) bool) client.Step {
	c.t.Helper()
	var st client.Step
	require.EventuallyWithT(c.t, func(ct *assert.CollectT) {
		s, err := c.step(id, key)
		require.NoError(ct, err)
		st = s
		assert.True(ct, cond(s), "step %s of run %s is %s", key, id, s.Status)
	}, timeout, 20*time.Millisecond, "step %s of run %s: %s", key, id, what)
	return st
}

// openOutput opens a step's output for reading; the caller closes it.
func (c *apiClient) openOutput(ctx context.Context, id, key string) (io.ReadCloser, error) {
	uid, err := parseRunID(id)
	if err != nil {
		return nil, err
	}
	resp, err := c.cl.GetStepOutput(ctx, uid, key)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// output downloads a step's output and returns its bytes.
func (c *apiClient) output(id, key string) []byte {
	c.t.Helper()
	ctx, cancel := withTimeout(time.Minute)
	defer cancel()
	body, err := c.openOutput(ctx, id, key)
	require.NoError(c.t, err, "output of %s/%s", id, key)
	defer body.Close()
	b, err := io.ReadAll(body)
	require.NoError(c.t, err)
	return b
}

// logs downloads the log (stderr) of an attempt of a step.
func (c *apiClient) logs(id, key string, attempt int) string {
	c.t.Helper()
	ctx, cancel := withTimeout(time.Minute)
	defer cancel()
	n := int64(attempt)
	resp, err := c.cl.GetAttemptLog(ctx, c.runID(id), key, &client.GetAttemptLogParams{Attempt: &n})
	require.NoError(c.t, err, "log of %s/%s attempt %d", id, key, attempt)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	return string(b)
}

// attemptStatuses lists the statuses of attempts in order.
func attemptStatuses(as []client.Attempt) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = string(a.Status)
	}
	return out
}
