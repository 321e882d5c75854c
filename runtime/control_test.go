package runtime_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/internal/testenv"
	cairnruntime "github.com/cairnrun/cairn/runtime"
)

// requireOneTerminalAttempt checks that step key of run id failed after exactly
// one attempt, with the handler's non-retryable "no", although max_attempts
// allowed more.
func requireOneTerminalAttempt(t *testing.T, tb *testBundle, id uuid.UUID, key string) {
	t.Helper()
	run := waitRun(t, tb, id, 2*time.Minute)
	require.Equal(t, catalog.RunFailed, run.Status)
	a := attempts(t, tb, id, key)
	var seen []string
	for _, at := range a {
		seen = append(seen, string(at.Status)+": "+string(at.Error))
	}
	require.Len(t, a, 1, "the handler said not to retry; attempts: %q", seen)
	require.Equal(t, catalog.AttemptFailed, a[0].Status)
	var fe struct {
		Message   string `json:"message"`
		Retryable bool   `json:"retryable"`
		Code      string `json:"code"`
	}
	require.NoError(t, json.Unmarshal(a[0].Error, &fe), "%s", a[0].Error)
	require.Equal(t, "no", fe.Message)
	require.False(t, fe.Retryable)
	require.Equal(t, "function_error", fe.Code)
	st := stepMap(t, tb, id)[key]
	require.Equal(t, catalog.StepFailed, st.Status)
	require.Equal(t, 1, st.Attempts)
}

// checkpointEvents returns the data of the step.checkpointed events of a run,
// in order.
func checkpointEvents(t *testing.T, tb *testBundle, id uuid.UUID) []json.RawMessage {
	t.Helper()
	return eventData(t, tb, id, catalog.EventStepCheckpointed)
}

// eventData returns the data of a run's events of type typ, in order.
func eventData(t *testing.T, tb *testBundle, id uuid.UUID, typ catalog.EventType) []json.RawMessage {
	t.Helper()
	var out []json.RawMessage
	var after int64
	for {
		events, err := tb.store.EventList(context.Background(), id, after, 1000)
		require.NoError(t, err)
		if len(events) == 0 {
			return out
		}
		for _, e := range events {
			if e.Type == typ {
				out = append(out, json.RawMessage(e.Data))
			}
			after = e.Seq
		}
	}
}

// TestManyCheckpointsThenTerminalError: a handler stores 3,000 checkpoints (a
// database transaction each) and then says not to retry, and exits at once: its
// lines are still in the pipe. Every checkpoint is stored, and the step fails
// after one attempt although max_attempts is 3.
func TestManyCheckpointsThenTerminalError(t *testing.T) {
	t.Parallel()
	_, tb := setup(t)
	startDispatcher(t, tb, cairnruntime.Config{})
	const n = 3000
	v := deploy(t, tb, map[string]string{
		"cairn.yaml": `
name: many-checkpoints
steps:
  - key: work
    exec: ["./bin/work"]
    retry: {max_attempts: 3, backoff: fixed, delay: 100ms}
`,
		"bin/work": "#!/bin/sh\n" +
			"seq 1 " + strconv.Itoa(n) + " | sed 's/.*/{\"checkpoint\":&}/' >&3\n" +
			"echo '{\"error\":{\"message\":\"no\",\"retryable\":false}}' >&3\n" +
			"exit 1\n",
	})
	id := startRun(t, tb, v, "")
	requireOneTerminalAttempt(t, tb, id, "work")

	events := checkpointEvents(t, tb, id)
	require.Len(t, events, n)
	for i, e := range events {
		var d struct{ Checkpoint int }
		require.NoError(t, json.Unmarshal(e, &d))
		require.Equal(t, i+1, d.Checkpoint, "checkpoint %d in order", i+1)
	}
	require.JSONEq(t, strconv.Itoa(n), string(stepMap(t, tb, id)["work"].Checkpoint))
}

// TestCheckpointsDuringBlobStoreOutage: the blob store goes down while a handler
// writes checkpoints too large to be inline, then says not to retry and exits.
// The checkpoints wait for the store (minio-go retries) for longer than the
// invoker waits for a finished handler's pipes; when the store comes back, the
// rest of the lines are read: the step fails after one attempt, not retried.
func TestCheckpointsDuringBlobStoreOutage(t *testing.T) {
	t.Parallel()
	s3 := testenv.StartS3Process(t, "")
	_, tb := setup(t)
	tb.blobs = s3.Store()
	startDispatcher(t, tb, cairnruntime.Config{Limits: cairnruntime.Limits{InlineLimit: 1024}})
	marks := t.TempDir()
	v := deploy(t, tb, map[string]string{
		"cairn.yaml": `
name: blob-outage
steps:
  - key: work
    exec: ["./bin/work", "` + marks + `"]
    retry: {max_attempts: 3, backoff: fixed, delay: 100ms}
`,
		// Checkpoints of 2 KB: over the inline limit, so each is a blob.
		"bin/work": `#!/bin/sh
touch "$1/started"
while [ ! -e "$1/go" ]; do sleep 0.01; done
pad=$(head -c 2000 /dev/zero | tr '\0' x)
for i in 1 2 3 4 5; do echo "{\"checkpoint\":{\"n\":$i,\"pad\":\"$pad\"}}" >&3; done
echo '{"error":{"message":"no","retryable":false}}' >&3
touch "$1/exited"
exit 1
`,
	})
	id := startRun(t, tb, v, "")

	waitFile(t, filepath.Join(marks, "started"), "the handler to start")
	s3.Kill()
	require.NoError(t, os.WriteFile(filepath.Join(marks, "go"), nil, 0o644))
	waitFile(t, filepath.Join(marks, "exited"), "the handler to write its lines and exit")
	// The outage outlasts the invoker's kill grace (2 s) and pipe close delay
	// (250 ms) after the handler's exit: the lines wait in the pipe meanwhile.
	time.Sleep(3 * time.Second)
	s3.Start()

	requireOneTerminalAttempt(t, tb, id, "work")
}

// waitFile waits until path exists.
func waitFile(t *testing.T, path, what string) {
	t.Helper()
	require.Eventually(t, func() bool {
		_, err := os.Stat(path)
		return err == nil
	}, 30*time.Second, 10*time.Millisecond, "waiting for %s", what)
}
