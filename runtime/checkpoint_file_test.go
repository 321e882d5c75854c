package runtime_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/functions"
	cairnruntime "github.com/cairnrun/cairn/runtime"
)

// payloadBytes sums the sizes of the payloads in tb's blob store.
func payloadBytes(t *testing.T, tb *testBundle) int64 {
	t.Helper()
	var n int64
	for o, err := range tb.blobs.(blobstore.Lister).List(context.Background(), blobstore.KindPayloads) {
		require.NoError(t, err)
		n += o.Size
	}
	return n
}

// TestCheckpointFileLimit: a handler that names a
// 5 GiB sparse file (no disk blocks in its TMPDIR) as its checkpoint_file used to
// store 5 GiB in the blob store. Now a checkpoint_file over MaxCheckpointSize
// (CAIRN_MAX_CHECKPOINT_SIZE) fails the attempt at once, terminally, with code
// checkpoint_too_large and a message naming the limit, and nothing is stored; one
// under the limit is stored as before.
func TestCheckpointFileLimit(t *testing.T) {
	t.Parallel()
	_, tb := setup(t)
	const limit = 1 << 20
	startDispatcher(t, tb, cairnruntime.Config{Limits: cairnruntime.Limits{MaxCheckpointSize: limit}})
	v := deploy(t, tb, map[string]string{
		"cairn.yaml": `
name: sparse
steps:
  - key: small
    exec: ["./bin/small"]
  - key: big
    needs: [small]
    exec: ["./bin/big"]
    retry: {max_attempts: 3, backoff: fixed, delay: 100ms}
`,
		"bin/small": `#!/bin/sh
cat >/dev/null
head -c 1000 /dev/zero > "$TMPDIR/cp"
echo "{\"checkpoint_file\": \"$TMPDIR/cp\"}" >&3
echo '{}'
`,
		// A 5 GiB sparse file; the sleep is cut short by the refusal.
		"bin/big": `#!/bin/sh
cat >/dev/null
truncate -s 5G "$TMPDIR/sparse"
echo "{\"checkpoint_file\": \"$TMPDIR/sparse\"}" >&3
sleep 600
echo '{}'
`,
	})
	id := startRun(t, tb, v, "")
	run := waitRun(t, tb, id, 2*time.Minute)
	require.Equal(t, catalog.RunFailed, run.Status)

	steps := stepMap(t, tb, id)
	require.Equal(t, catalog.StepSucceeded, steps["small"].Status)
	ref, ok := blobstore.ParseRef(json.RawMessage(steps["small"].Checkpoint))
	require.True(t, ok, "%s", steps["small"].Checkpoint)
	require.EqualValues(t, 1000, ref.Size)

	a := attempts(t, tb, id, "big")
	require.Len(t, a, 1, "terminal: not retried")
	var fe functions.Error
	require.NoError(t, json.Unmarshal(a[0].Error, &fe), "%s", a[0].Error)
	require.Equal(t, functions.CodeCheckpointTooLarge, fe.Code)
	require.Contains(t, fe.Message, "limit of "+strconv.Itoa(limit)+" bytes (CAIRN_MAX_CHECKPOINT_SIZE)")
	require.False(t, fe.Retryable)
	require.Nil(t, steps["big"].Checkpoint)
	require.EqualValues(t, 1000, payloadBytes(t, tb), "only the small checkpoint is stored")
}
