package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/client"
)

// matrixCase is the world of one row of the failure matrix.
type matrixCase struct {
	t     *testing.T
	st    *stack
	srv   *server // the server of the run; a row may replace it
	api   *apiClient
	dir   string // the row's folder: ledgers, gates
	url   string // what {{url}} stands for
	runID string

	mu       sync.Mutex
	received []string // Idempotency-Key of each request an http function got
}

// files turns a manifest and scripts into bundle files, with {{dir}} and {{url}}
// replaced.
func (m *matrixCase) files(manifest string, scripts map[string]string) map[string]string {
	r := strings.NewReplacer("{{dir}}", m.dir, "{{url}}", m.url)
	out := map[string]string{"cairn.yaml": r.Replace(manifest)}
	for p, s := range scripts {
		out[p] = r.Replace(s)
	}
	return out
}

// receive records a request to the row's http function.
func (m *matrixCase) receive(r *http.Request) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.received = append(m.received, r.Header.Get("Idempotency-Key"))
}

func (m *matrixCase) requests() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.received...)
}

// attemptError returns the error of attempt n (1-based) of a step.
func (m *matrixCase) attemptError(key string, n int) apiError {
	m.t.Helper()
	as := m.api.mustAttempts(m.runID, key)
	require.GreaterOrEqual(m.t, len(as), n)
	require.NotNil(m.t, as[n-1].Error, "attempt %d of %s has no error", n, key)
	return errorOf(as[n-1].Error)
}

// hasEvent reports whether the run's history holds an event of type for step.
func (m *matrixCase) hasEvent(typ, step string) bool {
	for _, e := range m.api.events(m.runID) {
		if e.Type == typ && deref(e.Step) == step {
			return true
		}
	}
	return false
}

// TestFailureMatrix runs one workflow per way a step can fail and checks what the
// catalog records: which attempts ran, how each ended, and how the run ended.
func TestFailureMatrix(t *testing.T) {
	t.Parallel()
	const oneExec = `name: matrix
steps:
  - key: work
    exec: ["./bin/work"]
    retry: {max_attempts: 2, delay: 100ms}
`
	// versioned holds a step that waits for a gate, then one that says which
	// version of the bundle it came from.
	versioned := func(m *matrixCase, label string) map[string]string {
		return m.files(`name: matrix
steps:
  - key: gate
    exec: ["./bin/gate"]
  - key: which
    needs: [gate]
    exec: ["./bin/which"]
`, map[string]string{
			"bin/gate":  "#!/bin/bash\nwhile [ ! -e '{{dir}}/gate' ]; do sleep 0.05; done\necho '{}'\n",
			"bin/which": "#!/bin/bash\necho '{\"script\":\"" + label + "\",\"version\":'$CAIRN_VERSION'}'\n",
		})
	}

	// firstAttemptHangs is one step with the default retry policy whose first
	// attempt sleeps a minute and whose next one answers at once.
	firstAttemptHangs := func(m *matrixCase) map[string]string {
		return m.files(`name: matrix
steps:
  - key: work
    exec: ["./bin/work"]
`, map[string]string{"bin/work": `#!/bin/bash
if [ "$CAIRN_ATTEMPT" = 1 ]; then sleep 60; fi
echo '{"done":'$CAIRN_ATTEMPT'}'
`})
	}

	rows := []struct {
		name string
		// setup prepares the row before its server starts (an http function).
		setup func(m *matrixCase)
		// bundle is the first version of workflow "matrix".
		bundle func(m *matrixCase) map[string]string
		server serverOptions
		// during acts while the run is in progress.
		during       func(m *matrixCase)
		wantRun      client.RunStatus
		wantAttempts map[string][]string
		wantSteps    map[string]client.StepStatus
		check        func(m *matrixCase)
	}{
		{
			name: "handler-crashes-before-work",
			bundle: func(m *matrixCase) map[string]string {
				return m.files(oneExec, map[string]string{"bin/work": `#!/bin/bash
if [ "$CAIRN_ATTEMPT" = 1 ]; then kill -9 $$; fi
echo '{"done":true}'
`})
			},
			wantRun:      "succeeded",
			wantAttempts: map[string][]string{"work": {"failed", "succeeded"}},
			check: func(m *matrixCase) {
				e := m.attemptError("work", 1)
				require.Equal(m.t, "signal", e.Code)
				require.True(m.t, e.Retryable)
			},
		},
		{
			// At least once: the side effect of the crashed attempt happened, and
			// the retry does it again under the same identity, which is what a
			// handler uses to make it idempotent.
			name: "handler-crashes-after-side-effect",
			bundle: func(m *matrixCase) map[string]string {
				return m.files(oneExec, map[string]string{"bin/work": `#!/bin/bash
echo "$CAIRN_RUN_ID/$CAIRN_STEP" >> '{{dir}}/ledger'
if [ "$CAIRN_ATTEMPT" = 1 ]; then kill -9 $$; fi
echo '{"done":true}'
`})
			},
			wantRun:      "succeeded",
			wantAttempts: map[string][]string{"work": {"failed", "succeeded"}},
			check: func(m *matrixCase) {
				b, err := os.ReadFile(filepath.Join(m.dir, "ledger"))
				require.NoError(m.t, err)
				identity := m.runID + "/work"
				require.Equal(m.t, identity+"\n"+identity+"\n", string(b))
			},
		},
		{
			name: "retryable-failure",
			bundle: func(m *matrixCase) map[string]string {
				return m.files(oneExec, map[string]string{"bin/work": `#!/bin/bash
if [ "$CAIRN_ATTEMPT" = 1 ]; then echo "transient trouble" >&2; exit 1; fi
echo '{"done":true}'
`})
			},
			wantRun:      "succeeded",
			wantAttempts: map[string][]string{"work": {"failed", "succeeded"}},
			check: func(m *matrixCase) {
				e := m.attemptError("work", 1)
				require.Equal(m.t, "exit_status", e.Code)
				require.True(m.t, e.Retryable)
				require.Contains(m.t, e.Message, "transient trouble")
				require.True(m.t, m.hasEvent("step.retrying", "work"))
			},
		},
		{
			name: "terminal-failure",
			bundle: func(m *matrixCase) map[string]string {
				return m.files(`name: matrix
steps:
  - key: work
    exec: ["./bin/work"]
    retry: {max_attempts: 3, delay: 100ms}
  - key: after
    needs: [work]
    builtin: noop
  - key: last
    needs: [after]
    builtin: noop
`, map[string]string{"bin/work": `#!/bin/bash
echo '{"error":{"message":"no","retryable":false}}' >&3
exit 1
`})
			},
			wantRun:      "failed",
			wantAttempts: map[string][]string{"work": {"failed"}, "after": {}, "last": {}},
			wantSteps:    map[string]client.StepStatus{"work": "failed", "after": "skipped", "last": "skipped"},
			check: func(m *matrixCase) {
				e := m.attemptError("work", 1)
				require.Equal(m.t, apiError{Message: "no", Code: "function_error", Retryable: false}, e)
				run, err := m.api.run(m.runID)
				require.NoError(m.t, err)
				var re struct{ Step string }
				require.NoError(m.t, json.Unmarshal(jsonOf(run.Error), &re))
				require.Equal(m.t, "work", re.Step)
			},
		},
		{
			// SIGTERM while a step runs: the server hands the lease back when its
			// shutdown grace is over; the attempt is interrupted and does not count
			// (max_attempts is 1), and the next server finishes the step.
			name:   "server-restart-mid-run",
			bundle: firstAttemptHangs,
			server: serverOptions{shutdownGrace: 500 * time.Millisecond},
			during: func(m *matrixCase) {
				m.api.waitStep(m.runID, "work", 20*time.Second, "running", func(s client.Step) bool { return s.Status == client.StepStatusRunning })
				m.srv.stop(30 * time.Second)
				m.srv = m.st.start(serverOptions{})
				m.api = m.srv.api()
			},
			wantRun:      "succeeded",
			wantAttempts: map[string][]string{"work": {"interrupted", "succeeded"}},
			check: func(m *matrixCase) {
				as := m.api.mustAttempts(m.runID, "work")
				require.False(m.t, as[0].Counted, "a handed back attempt does not count")
				require.Equal(m.t, "shutdown", errorOf(as[0].Error).Code)
				require.True(m.t, m.srv.owns(as[1].Dispatcher))
				require.True(m.t, m.hasEvent("step.handed_back", "work"))
			},
		},
		{
			// SIGKILL while a step runs, with the default retry policy (max_attempts
			// 1): the lease expires, the attempt is interrupted and does not count,
			// and the next server finishes the step. A crash never fails a run.
			name:   "server-killed-mid-step",
			bundle: firstAttemptHangs,
			during: func(m *matrixCase) {
				m.api.waitStep(m.runID, "work", 20*time.Second, "running", func(s client.Step) bool { return s.Status == client.StepStatusRunning })
				m.srv.kill()
				m.srv = m.st.start(serverOptions{})
				m.api = m.srv.api()
			},
			wantRun:      "succeeded",
			wantAttempts: map[string][]string{"work": {"interrupted", "succeeded"}},
			check: func(m *matrixCase) {
				as := m.api.mustAttempts(m.runID, "work")
				require.False(m.t, as[0].Counted, "an attempt whose server died does not count")
				require.Equal(m.t, "lease_expired", errorOf(as[0].Error).Code)
				require.True(m.t, m.srv.owns(as[1].Dispatcher))
				require.JSONEq(m.t, `{"done":2}`, string(m.api.output(m.runID, "work")))
			},
		},
		{
			// A poison pill: the dispatcher of every attempt dies while it runs
			// (the test SIGKILLs the server as soon as the handler has started,
			// as the kernel's out-of-memory killer would). After max_interruptions
			// in a row (default 5) the step fails with interrupted_too_often
			// instead of taking down server after server.
			name: "handler-kills-its-dispatcher",
			bundle: func(m *matrixCase) map[string]string {
				return m.files(`name: matrix
steps:
  - key: work
    exec: ["./bin/work"]
    retry: {max_attempts: 3}
`, map[string]string{"bin/work": `#!/bin/bash
touch '{{dir}}/started-'$CAIRN_ATTEMPT
sleep 60
`})
			},
			during: func(m *matrixCase) {
				for n := 1; n <= bundle.DefaultMaxInterruptions; n++ {
					started := filepath.Join(m.dir, "started-"+strconv.Itoa(n))
					require.Eventually(m.t, func() bool { _, err := os.Stat(started); return err == nil },
						30*time.Second, 20*time.Millisecond, "attempt %d did not start", n)
					m.srv.kill()
					m.srv = m.st.start(serverOptions{})
					m.api = m.srv.api()
				}
			},
			wantRun:      "failed",
			wantAttempts: map[string][]string{"work": slices.Repeat([]string{"interrupted"}, bundle.DefaultMaxInterruptions)},
			check: func(m *matrixCase) {
				st := m.api.mustStep(m.runID, "work")
				e := errorOf(st.LastError)
				require.Equal(m.t, "interrupted_too_often", e.Code)
				require.Contains(m.t, e.Message, fmt.Sprintf("interrupted %d times in a row", bundle.DefaultMaxInterruptions))
				for _, a := range m.api.mustAttempts(m.runID, "work") {
					require.False(m.t, a.Counted, "attempt %d", a.Number)
				}
			},
		},
		{
			// A run keeps the version it started with; a run started after the
			// deploy takes the new one.
			name:   "new-version-mid-run",
			bundle: func(m *matrixCase) map[string]string { return versioned(m, "v1") },
			during: func(m *matrixCase) {
				m.api.waitStep(m.runID, "gate", 20*time.Second, "running", func(s client.Step) bool { return s.Status == client.StepStatusRunning })
				require.EqualValues(m.t, 2, m.api.deploy(versioned(m, "v2")).Version)
				second := m.api.startRun("matrix", 0, nil)
				require.NoError(m.t, os.WriteFile(filepath.Join(m.dir, "gate"), nil, 0o644))
				run := m.api.waitRun(second, 30*time.Second)
				require.Equal(m.t, client.RunStatusSucceeded, run.Status)
				require.EqualValues(m.t, 2, run.Version)
				require.JSONEq(m.t, `{"script":"v2","version":2}`, string(m.api.output(second, "which")))
			},
			wantRun:      "succeeded",
			wantAttempts: map[string][]string{"gate": {"succeeded"}, "which": {"succeeded"}},
			check: func(m *matrixCase) {
				run, err := m.api.run(m.runID)
				require.NoError(m.t, err)
				require.EqualValues(m.t, 1, run.Version)
				require.JSONEq(m.t, `{"script":"v1","version":1}`, string(m.api.output(m.runID, "which")))
			},
		},
		{
			name: "http-never-answers",
			setup: func(m *matrixCase) {
				release := make(chan struct{})
				fn := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					m.receive(r)
					<-release // never answers while the test runs
				}))
				m.t.Cleanup(fn.Close)
				m.t.Cleanup(func() { close(release) })
				m.url = fn.URL
			},
			bundle: func(m *matrixCase) map[string]string {
				return m.files(`name: matrix
steps:
  - key: call
    http: {url: "{{url}}"}
    timeout: 1s
    retry: {max_attempts: 2, delay: 100ms}
`, nil)
			},
			wantRun:      "failed",
			wantAttempts: map[string][]string{"call": {"timed_out", "timed_out"}},
			check: func(m *matrixCase) {
				require.Equal(m.t, "timeout", m.attemptError("call", 2).Code)
				identity := m.runID + "/call"
				require.Equal(m.t, []string{identity, identity}, m.requests())
			},
		},
		{
			name: "http-unreachable",
			setup: func(m *matrixCase) {
				port, err := freePort() // nothing listens there
				require.NoError(m.t, err)
				m.url = "http://127.0.0.1:" + itoa(port) + "/fn"
			},
			bundle: func(m *matrixCase) map[string]string {
				return m.files(`name: matrix
steps:
  - key: call
    http: {url: "{{url}}"}
    retry: {max_attempts: 2, delay: 100ms}
`, nil)
			},
			wantRun:      "failed",
			wantAttempts: map[string][]string{"call": {"failed", "failed"}},
			check: func(m *matrixCase) {
				for n := 1; n <= 2; n++ {
					e := m.attemptError("call", n)
					require.Equal(m.t, "network", e.Code)
					require.True(m.t, e.Retryable)
				}
			},
		},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			m := &matrixCase{t: t, dir: t.TempDir()}
			if row.setup != nil {
				row.setup(m)
			}
			m.st = newStack(t, stackOptions{})
			m.srv = m.st.start(row.server)
			m.api = m.srv.api()
			m.api.deploy(row.bundle(m))
			m.runID = m.api.startRun("matrix", 0, nil)
			if row.during != nil {
				row.during(m)
			}
			run := m.api.waitRun(m.runID, 40*time.Second)
			require.Equal(t, row.wantRun, run.Status, "run error: %s", jsonOf(run.Error))
			for key, want := range row.wantAttempts {
				require.Equal(t, want, attemptStatuses(m.api.mustAttempts(m.runID, key)), "attempts of %s", key)
			}
			for key, want := range row.wantSteps {
				require.Equal(t, want, m.api.mustStep(m.runID, key).Status, "step %s", key)
			}
			if row.check != nil {
				row.check(m)
			}
		})
	}
}
