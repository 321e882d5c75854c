package runtime_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/functions"
	"github.com/cairnrun/cairn/runtime"
)

// callbackBundle: wait answers $suspend (1s, on_timeout continue) after writing
// its callback_url to a file of the test and a line to its log; nested and beside
// answer outputs with a $suspend that is not the whole top-level object (plain
// data); bad answers a malformed $suspend.
func callbackBundle(dir string) map[string]string {
	return map[string]string{
		"cairn.yaml": `
name: callbacks
steps:
  - {key: wait, exec: ["./bin/wait", "` + dir + `"]}
  - {key: nested, exec: ["./bin/say", '{"order": {"$suspend": {"timeout": "1h"}}}']}
  - {key: beside, exec: ["./bin/say", '{"$suspend": {}, "id": 7}']}
  - {key: bad, exec: ["./bin/say", '{"$suspend": {"timeout": "soon"}}'], retry: {max_attempts: 3}}
`,
		"bin/wait": `#!/bin/sh
sed -n 's/.*"callback_url":"\([^"]*\)".*/\1/p' > "$1/url"
echo "started the work elsewhere" >&2
echo '{"$suspend": {"timeout": "1s", "on_timeout": "continue"}}'
`,
		"bin/say": "#!/bin/sh\nprintf '%s' \"$1\"\n",
	}
}

// TestSuspendForCallback: an exec function's {"$suspend": …} suspends its step for
// a callback (wait kind callback, timeout counted from its answer, its log kept),
// with a callback_url on the public URL, path prefix included, whose token names
// the attempt; on_timeout continue then succeeds it with null. A $suspend that is
// not the whole top-level object is the step's output like any other; a malformed
// one fails the step at once with code protocol.
func TestSuspendForCallback(t *testing.T) {
	t.Parallel()
	_, tb := setup(t)
	key := []byte("runtime-callback-key-0123456789")
	startDispatcher(t, tb, runtime.Config{Handlers: runtime.HandlerConfig{SigningKey: key, PublicURL: "http://proxy.example/cairn/"}})
	dir := t.TempDir()
	v := deploy(t, tb, callbackBundle(dir))
	started := time.Now()
	id := startRun(t, tb, v, "")

	var st catalog.Step
	require.EventuallyWithT(t, func(c *assert.CollectT) { // until wait is suspended
		st = stepMap(c, tb, id)["wait"]
		assert.Equal(c, catalog.StepSuspended, st.Status)
	}, 10*time.Second, 10*time.Millisecond)
	seen := time.Now()
	require.Equal(t, catalog.WaitCallback, *st.WaitKind)
	require.NotNil(t, st.TimeoutAt)
	// The handler answered between the run's start and now, and its 1s timeout
	// counts from the answer (a loaded machine may take seconds to spawn it, so
	// the bounds are these two moments, not a tolerance).
	slack := 10 * time.Millisecond
	require.False(t, st.TimeoutAt.Before(started.Add(time.Second-slack)), "timeout_at %s before the run started + 1s (%s)", st.TimeoutAt, started)
	require.False(t, st.TimeoutAt.After(seen.Add(time.Second+slack)), "timeout_at %s after the suspension was seen + 1s (%s)", st.TimeoutAt, seen)
	url, err := os.ReadFile(filepath.Join(dir, "url"))
	require.NoError(t, err)
	token, ok := strings.CutPrefix(strings.TrimSpace(string(url)), "http://proxy.example/cairn/v1/callbacks/")
	require.True(t, ok, "callback_url %s", url)
	run, step, attempt, err := functions.ParseCallbackToken(key, token)
	require.NoError(t, err)
	require.Equal(t, id, run)
	require.Equal(t, "wait", step)
	require.Equal(t, 1, attempt)
	as := attempts(t, tb, id, "wait")
	require.Len(t, as, 1)
	require.Equal(t, catalog.AttemptSucceeded, as[0].Status, "the attempt ended; the step waits")
	require.NotNil(t, as[0].LogKey, "the suspending attempt's log is kept")

	done := waitRun(t, tb, id, 20*time.Second)
	require.Equal(t, catalog.RunFailed, done.Status, "bad fails the run")
	steps := stepMap(t, tb, id)
	require.Equal(t, catalog.StepSucceeded, steps["wait"].Status, "on_timeout continue")
	require.Contains(t, []string{"", "null"}, string(steps["wait"].Output), "no output: null")
	require.Equal(t, catalog.StepSucceeded, steps["nested"].Status)
	require.JSONEq(t, `{"order": {"$suspend": {"timeout": "1h"}}}`, string(steps["nested"].Output))
	require.Equal(t, catalog.StepSucceeded, steps["beside"].Status)
	require.JSONEq(t, `{"$suspend": {}, "id": 7}`, string(steps["beside"].Output))
	require.Equal(t, catalog.StepFailed, steps["bad"].Status)
	require.Equal(t, 1, steps["bad"].Attempts, "a malformed $suspend is not retried")
	var e functions.Error
	require.NoError(t, json.Unmarshal(steps["bad"].LastError, &e))
	require.Equal(t, functions.CodeProtocol, e.Code)
	require.Contains(t, e.Message, "timeout")
}

// TestSuspendWithoutSigningKey: a dispatcher without a signing key gives no
// callback_url, and a $suspend fails the step with code protocol, saying why.
func TestSuspendWithoutSigningKey(t *testing.T) {
	t.Parallel()
	_, tb := setup(t)
	startDispatcher(t, tb, runtime.Config{})
	dir := t.TempDir()
	v := deploy(t, tb, callbackBundle(dir))
	id := startRun(t, tb, v, "")
	waitRun(t, tb, id, 20*time.Second)
	st := stepMap(t, tb, id)["wait"]
	require.Equal(t, catalog.StepFailed, st.Status)
	var e functions.Error
	require.NoError(t, json.Unmarshal(st.LastError, &e))
	require.Equal(t, functions.CodeProtocol, e.Code)
	require.Contains(t, e.Message, "CAIRN_SIGNING_KEY")
	url, err := os.ReadFile(filepath.Join(dir, "url"))
	require.NoError(t, err)
	require.Empty(t, strings.TrimSpace(string(url)), "no callback_url in the envelope")
}

// TestCallbackBeforeAnswer: a third party quicker than the function: its callback
// comes while the attempt still runs, is kept, and completes the step the moment
// the function answers {"$suspend": …}; the run goes on with it.
func TestCallbackBeforeAnswer(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	key := []byte("runtime-callback-key-0123456789")
	startDispatcher(t, tb, runtime.Config{Handlers: runtime.HandlerConfig{SigningKey: key, PublicURL: "http://127.0.0.1:1"}})
	dir := t.TempDir()
	v := deploy(t, tb, map[string]string{
		"cairn.yaml": `
name: quick-third-party
steps:
  - {key: pay, exec: ["./bin/pay", "` + dir + `"]}
  - {key: after, needs: [pay], builtin: noop}
`,
		// Hands out its URL, then answers only once the test says so.
		"bin/pay": `#!/bin/sh
sed -n 's/.*"callback_url":"\([^"]*\)".*/\1/p' > "$1/url.tmp" && mv "$1/url.tmp" "$1/url"
while [ ! -e "$1/go" ]; do sleep 0.05; done
echo '{"$suspend": {"timeout": "1h"}}'
`,
	})
	id := startRun(t, tb, v, "")
	var url []byte
	require.Eventually(t, func() bool { // until the function has handed out its URL
		var err error
		url, err = os.ReadFile(filepath.Join(dir, "url"))
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	token := strings.TrimPrefix(strings.TrimSpace(string(url)), "http://127.0.0.1:1/v1/callbacks/")
	run, step, attempt, err := functions.ParseCallbackToken(key, token)
	require.NoError(t, err)
	buffered, err := tb.store.CallbackComplete(ctx, run, step, attempt,
		catalog.Resolution{Outcome: catalog.OutcomeSucceeded, Output: json.RawMessage(`{"early":true}`)})
	require.NoError(t, err)
	require.True(t, buffered, "the attempt still runs")
	require.Equal(t, catalog.StepRunning, stepMap(t, tb, id)["pay"].Status)

	require.NoError(t, os.WriteFile(filepath.Join(dir, "go"), nil, 0o644))
	done := waitRun(t, tb, id, 20*time.Second)
	require.Equal(t, catalog.RunSucceeded, done.Status)
	require.JSONEq(t, `{"early":true}`, string(stepMap(t, tb, id)["pay"].Output))
}
