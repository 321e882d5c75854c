package runtime_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/runtime"
)

// oneSecret reveals one secret.
type oneSecret struct{ name, value string }

func (s oneSecret) Reveal(_ context.Context, name string) ([]byte, int, error) {
	if name != s.name {
		return nil, 0, catalog.ErrNotFound
	}
	return []byte(s.value), 1, nil
}

// TestLiveLogMaskedAndCapped: the live tail of a running attempt is masked as its
// stored log is (a secret the handler prints shows as ***), and only its last bytes
// are kept (LiveLogTail): the start is dropped as the handler goes on; once the
// attempt ends, the stored log is whole and the tail is gone.
func TestLiveLogMaskedAndCapped(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	secret := "s3cr3t-" + strings.Repeat("x", 20)
	startDispatcher(t, tb, runtime.Config{
		Handlers: runtime.HandlerConfig{Secrets: oneSecret{"tok", secret}},
		Limits: runtime.Limits{LiveLogInterval: 50 * time.Millisecond,
			LiveLogTail: 64,
		},
	})
	v := deploy(t, tb, map[string]string{
		"cairn.yaml": "name: leaky\nsteps:\n  - {key: talk, exec: [./bin/talk], env: {TOKEN: {secret: tok}}}\n",
		"bin/talk": "#!/bin/sh\ncat >/dev/null\necho \"token=$TOKEN\" >&2\nsleep 1\n" +
			"i=10\nwhile [ $i -le 40 ]; do echo \"line $i\" >&2; sleep 0.05; i=$((i+1)); done\necho '{}'\n",
	})
	id := startRun(t, tb, v, "")

	read := func(c *assert.CollectT) *catalog.LogChunks {
		live, err := tb.store.LogChunkRead(ctx, id, "talk", 1, 0)
		require.NoError(c, err)
		require.NotContains(c, string(live.Data), secret, "the live tail is masked")
		return live
	}
	running := func(c *assert.CollectT) {
		st, err := tb.store.StepGet(ctx, id, "talk")
		require.NoError(c, err)
		require.Equal(c, catalog.StepRunning, st.Status, "the attempt still runs")
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		live := read(c)
		assert.Equal(c, "token=***\n", string(live.Data))
		running(c)
	}, 30*time.Second, 20*time.Millisecond, "waiting for the masked first line, while the handler sleeps")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		live := read(c)
		assert.Positive(c, live.Offset, "the start is no longer kept")
		assert.LessOrEqual(c, len(live.Data), 64+64, "the tail and at most one chunk more")
		assert.Contains(c, string(live.Data), "line 2")
		running(c)
	}, 30*time.Second, 20*time.Millisecond, "waiting for the tail to move on")

	require.Equal(t, catalog.RunSucceeded, waitRun(t, tb, id, time.Minute).Status)
	a, err := tb.store.AttemptGet(ctx, id, "talk", 1)
	require.NoError(t, err)
	require.NotNil(t, a.LogKey, "the whole log is stored")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		live := read(c)
		assert.Empty(c, live.Data, "the live tail is deleted once the log is stored")
	}, 10*time.Second, 20*time.Millisecond)
}
