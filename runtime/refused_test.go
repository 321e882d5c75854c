package runtime_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/functions"
	"github.com/cairnrun/cairn/internal/testenv"
	"github.com/cairnrun/cairn/runtime"
)

// Values PostgreSQL refuses in what a step produced: each one was once retried
// every 500 ms for ever, the step stayed running, held its slot, and a cancel did
// not stop it.

// nulOutput is an exec handler whose output holds a JSON \u0000, which jsonb
// refuses (22P05).
const nulOutput = "#!/bin/sh\ncat >/dev/null\necho working >&2\nprintf '%s\\n' '{\"a\": \"\\u0000\"}'\n"

// refusedOutput is the error of a step whose output the catalog refused.
const refusedOutput = "output: PostgreSQL refused the value: unsupported Unicode escape sequence (22P05)"

// requireRefused checks that step key of run id failed for good after one
// attempt with code invalid_output and message msg, although its retry policy
// allowed more attempts.
func requireRefused(t *testing.T, tb *testBundle, id uuid.UUID, key, msg string) {
	t.Helper()
	run := waitRun(t, tb, id, time.Minute)
	require.Equal(t, catalog.RunFailed, run.Status)
	e := stepError(t, tb, id, key)
	require.Equal(t, runtime.CodeInvalidOutput, e["code"], "%v", e)
	require.Equal(t, msg, e["message"])
	require.Equal(t, false, e["retryable"])
	st := stepMap(t, tb, id)[key]
	require.Equal(t, catalog.StepFailed, st.Status)
	require.Equal(t, 1, st.Attempts, "a refused value is not retried")
}

// TestRefusedOutput: an exec handler's output with \u0000 fails the step at once,
// code invalid_output, not retried (max_attempts 3).
func TestRefusedOutput(t *testing.T) {
	t.Parallel()
	_, tb := setup(t)
	startDispatcher(t, tb, runtime.Config{})
	v := deploy(t, tb, map[string]string{
		"cairn.yaml": `
name: nul-output
steps:
  - {key: out, exec: ["./bin/nul"], retry: {max_attempts: 3, delay: 10ms}}
  - {key: after, needs: [out], builtin: noop}
`,
		"bin/nul": nulOutput,
	})
	id := startRun(t, tb, v, "")
	requireRefused(t, tb, id, "out", refusedOutput)
	require.Equal(t, catalog.StepSkipped, stepMap(t, tb, id)["after"].Status)
	a := attempts(t, tb, id, "out")
	require.Len(t, a, 1)
	require.Equal(t, catalog.AttemptFailed, a[0].Status)
	require.NotNil(t, a[0].LogKey, "the attempt's log is kept")
}

// TestHTTPOutputRefused: an http endpoint answering {"a":"\u0000"} fails its step
// with invalid_output.
func TestHTTPOutputRefused(t *testing.T) {
	t.Parallel()
	_, tb := setup(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"a":"\u0000"}`)
	}))
	t.Cleanup(srv.Close)
	httpInvoker := functions.NewHTTP(&functions.HTTPConfig{SigningKey: []byte("0123456789abcdef0123456789abcdef"), AllowLocal: true})
	startDispatcher(t, tb, runtime.Config{Handlers: runtime.HandlerConfig{Invokers: map[bundle.Kind]functions.Invoker{bundle.KindHTTP: httpInvoker}}})
	v := deploy(t, tb, map[string]string{"cairn.yaml": `
name: http-nul
steps:
  - {key: call, http: {url: "` + srv.URL + `/x"}, retry: {max_attempts: 3, delay: 10ms}}
`})
	requireRefused(t, tb, startRun(t, tb, v, ""), "call", refusedOutput)
}

// TestChildInputRefused: a child run's input with a NUL fails the workflow step,
// as does a map's list of items with one.
func TestChildInputRefused(t *testing.T) {
	t.Parallel()
	_, tb := setup(t)
	startDispatcher(t, tb, runtime.Config{})
	deploy(t, tb, map[string]string{"cairn.yaml": `
name: probe
steps:
  - {key: echo, builtin: echo}
`})
	v := deploy(t, tb, map[string]string{"cairn.yaml": `
name: nul-child
steps:
  - {key: child, workflow: {name: probe, input: '{"cmd": "a\u0000b"}'}, retry: {max_attempts: 3, delay: 10ms}}
`})
	id := startRun(t, tb, v, "")
	requireRefused(t, tb, id, "child", "workflow.input: PostgreSQL refused the value: unsupported Unicode escape sequence (22P05)")
	require.Nil(t, stepMap(t, tb, id)["child"].ChildRun, "no child run was made")

	v = deploy(t, tb, map[string]string{"cairn.yaml": `
name: nul-map
steps:
  - {key: each, map: {over: '["a", "b\u0000"]'}, builtin: echo, retry: {max_attempts: 3, delay: 10ms}}
`})
	requireRefused(t, tb, startRun(t, tb, v, ""), "each", "map.over: PostgreSQL refused the value: unsupported Unicode escape sequence (22P05)")
}

// TestNULInErrorMessage: a NUL in a failure's message (an exec handler's stderr
// tail, its error control message) is no reason to lose the failure: the message
// is stored with U+FFFD in its place, and the failure keeps its code and whether
// it may be retried.
func TestNULInErrorMessage(t *testing.T) {
	t.Parallel()
	_, tb := setup(t)
	startDispatcher(t, tb, runtime.Config{})
	v := deploy(t, tb, map[string]string{
		"cairn.yaml": `
name: nul-errors
steps:
  - {key: stderr, exec: ["./bin/stderr"], retry: {max_attempts: 2, delay: 10ms}}
  - {key: control, exec: ["./bin/control"], retry: {max_attempts: 3, delay: 10ms}}
`,
		"bin/stderr":  "#!/bin/sh\nprintf 'a\\000b\\n' >&2\nexit 1\n",
		"bin/control": "#!/bin/sh\nprintf '%s\\n' '{\"error\": {\"message\": \"x\\u0000y\", \"retryable\": false}}' >&3\nexit 1\n",
	})
	id := startRun(t, tb, v, "")
	require.Equal(t, catalog.RunFailed, waitRun(t, tb, id, time.Minute).Status)

	a := attempts(t, tb, id, "stderr")
	require.Len(t, a, 2, "the exit status is retryable: both attempts ran")
	for _, at := range a {
		require.Equal(t, catalog.AttemptFailed, at.Status)
	}
	e := stepError(t, tb, id, "stderr")
	require.Equal(t, functions.CodeExitStatus, e["code"])
	require.Contains(t, e["message"], "stderr: a\uFFFDb")

	e = stepError(t, tb, id, "control")
	require.Equal(t, functions.CodeFunctionError, e["code"])
	require.Equal(t, "x\uFFFDy", e["message"])
	require.Len(t, attempts(t, tb, id, "control"), 1, "retryable: false holds")
}

// TestRefusedOutputsHoldNoSlot: on a dispatcher of 2
// slots, with its outcomes written to real PostgreSQL and its blobs to S3, a map
// of 50 instances that each give a refused output fails with invalid_output; a
// run of the same map canceled while its instances run ends canceled; and an
// unrelated run started behind them completes.
func TestRefusedOutputsHoldNoSlot(t *testing.T) {
	t.Parallel()
	_, tb := setup(t)
	tb.blobs = testenv.Blobs(t)
	startDispatcher(t, tb, runtime.Config{Concurrency: 2})
	gate := t.TempDir()
	v := deploy(t, tb, map[string]string{
		"cairn.yaml": `
name: nul-map
steps:
  - key: each
    map: {over: "input.items", max_parallel: 50}
    exec: ["./bin/nul", "` + gate + `"]
    retry: {max_attempts: 3, delay: 10ms}
`,
		// Waits for the gate file when the run's input says so, then gives a
		// refused output.
		"bin/nul": "#!/bin/sh\nenv=$(cat)\ncase \"$env\" in *'\"wait\":true'*) touch \"$1/started\"; while [ ! -e \"$1/open\" ]; do sleep 0.05; done;; esac\n" +
			"printf '%s\\n' '{\"a\": \"\\u0000\"}'\n",
	})
	items := make([]string, 50)
	for i := range items {
		items[i] = fmt.Sprint(i)
	}
	id := startRun(t, tb, v, `{"items": [`+strings.Join(items, ",")+`]}`)
	run := waitRun(t, tb, id, 2*time.Minute)
	require.Equal(t, catalog.RunFailed, run.Status)
	e := stepError(t, tb, id, "each")
	require.Equal(t, runtime.CodeMapFailed, e["code"], "%v", e)
	failures, _ := e["failures"].([]any)
	require.NotEmpty(t, failures)
	for _, f := range failures {
		fe, _ := f.(map[string]any)["error"].(map[string]any)
		require.Equal(t, runtime.CodeInvalidOutput, fe["code"], "%v", f)
		require.Equal(t, refusedOutput, fe["message"])
	}
	for key, st := range stepMap(t, tb, id) {
		require.NotEqual(t, catalog.StepRunning, st.Status, key)
		require.LessOrEqual(t, st.Attempts, 1, key)
	}

	// Canceled while its instances run: both slots are taken by instances that
	// wait for the gate, and give their refused outputs once it opens.
	id = startRun(t, tb, v, `{"wait": true, "items": [`+strings.Join(items, ",")+`]}`)
	waitFile(t, gate+"/started", "an instance to start")
	require.NoError(t, tb.store.RunCancel(context.Background(), id, "enough"))
	require.NoError(t, os.WriteFile(gate+"/open", nil, 0o644))
	require.Equal(t, catalog.RunCanceled, waitRun(t, tb, id, time.Minute).Status)

	// Both slots are free for an unrelated run.
	other := deploy(t, tb, map[string]string{"cairn.yaml": `
name: unrelated
steps:
  - {key: a, builtin: echo, with: {value: 1}}
  - {key: b, needs: [a], builtin: echo, with: {value: 2}}
`})
	oid := startRun(t, tb, other, "")
	require.Equal(t, catalog.RunSucceeded, waitRun(t, tb, oid, time.Minute).Status)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for key, st := range stepMap(c, tb, id) {
			assert.NotEqual(c, catalog.StepRunning, st.Status, key)
		}
	}, 30*time.Second, 20*time.Millisecond, "waiting for the canceled run's steps to end")
}

// TestRefusedOutputAmongOthers: outcomes are committed in groups; when the
// catalog refuses one instance's output, the instances finishing with it still
// succeed.
func TestRefusedOutputAmongOthers(t *testing.T) {
	t.Parallel()
	_, tb := setup(t)
	startDispatcher(t, tb, runtime.Config{})
	gate := t.TempDir()
	v := deploy(t, tb, map[string]string{
		"cairn.yaml": `
name: mixed
steps:
  - key: each
    map: {over: "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19]", max_parallel: 20, tolerate_failures: "50%"}
    exec: ["./bin/item", "` + gate + `"]
`,
		// Every instance waits for the gate, so that they finish together: the
		// odd items give a refused output, the even ones their item.
		"bin/item": "#!/bin/sh\nenv=$(cat)\ntouch \"$1/$$\"\nwhile [ ! -e \"$1/open\" ]; do sleep 0.02; done\n" +
			"case \"$env\" in *'\"index\":'*[13579]','*|*'\"index\":'*[13579]'}'*) printf '%s\\n' '{\"a\": \"\\u0000\"}';; *) echo '{\"ok\": true}';; esac\n",
	})
	id := startRun(t, tb, v, "")
	require.Eventually(t, func() bool {
		entries, err := os.ReadDir(gate)
		return err == nil && len(entries) == 20
	}, time.Minute, 10*time.Millisecond, "waiting for the 20 instances to start")
	require.NoError(t, os.WriteFile(gate+"/open", nil, 0o644))
	run := waitRun(t, tb, id, time.Minute)
	require.Equal(t, catalog.RunSucceeded, run.Status, "%s", run.Error)
	var outputs []any
	require.NoError(t, json.Unmarshal(stepMap(t, tb, id)["each"].Output, &outputs))
	require.Len(t, outputs, 20)
	items, err := tb.store.MapItemList(t.Context(), &catalog.MapItemListParams{RunID: id, Key: "each", After: -1, Limit: 100})
	require.NoError(t, err)
	require.Len(t, items, 20)
	for i, o := range outputs {
		if i%2 == 1 {
			require.Nil(t, o, "item %d", i)
			var e map[string]any
			require.NoError(t, json.Unmarshal(items[i].LastError, &e))
			require.Equal(t, runtime.CodeInvalidOutput, e["code"], "item %d", i)
		} else {
			require.Equal(t, map[string]any{"ok": true}, o, "item %d", i)
			require.Equal(t, catalog.StepSucceeded, items[i].Status, "item %d", i)
		}
	}
}

// TestMapBlobItemsRefused: a map over a $blob of JSON lines whose items cannot be
// made into instances (a \u0000 PostgreSQL refuses, a line that is not JSON)
// fails with invalid_output once its live instances end. Before, the map loop
// tried them again every poll, for ever.
func TestMapBlobItemsRefused(t *testing.T) {
	t.Parallel()
	_, tb := setup(t)
	startDispatcher(t, tb, runtime.Config{})
	for _, tt := range []struct {
		name, lines, message string
	}{
		{name: "nul", lines: `{"a": 1}\n{"b": "\\u0000"}\n{"c": 3}\n`,
			message: "map.over (items from #1): PostgreSQL refused the value: unsupported Unicode escape sequence (22P05)"},
		{name: "not-json", lines: `{"a": 1}\nnot json\n`,
			message: "map.over (items from #1): the catalog refused the value: items: the item at byte 9: invalid character 'o' in literal null (expecting 'u')"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := deploy(t, tb, map[string]string{
				"cairn.yaml": `
name: blob-items-` + tt.name + `
steps:
  - {key: split, exec: ["./bin/split"]}
  - {key: each, needs: [split], map: {over: "deps.split", max_parallel: 1}, builtin: echo}
`,
				// JSON Lines: not one JSON value, so a $blob whatever its size.
				"bin/split": "#!/bin/sh\ncat >/dev/null\nprintf '" + tt.lines + "'\n",
			})
			id := startRun(t, tb, v, "")
			require.Equal(t, catalog.RunFailed, waitRun(t, tb, id, time.Minute).Status)
			e := stepError(t, tb, id, "each")
			require.Equal(t, runtime.CodeInvalidOutput, e["code"], "%v", e)
			require.Equal(t, tt.message, e["message"])
			items, err := tb.store.MapItemList(t.Context(), &catalog.MapItemListParams{RunID: id, Key: "each", After: -1, Limit: 10})
			require.NoError(t, err)
			require.Len(t, items, 1, "the item before the refused one ran")
			require.Equal(t, catalog.StepSucceeded, items[0].Status)
		})
	}
}
