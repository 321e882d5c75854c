package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// limiterBundle is a progressLimiter on a clock the test moves, and what it
// recorded.
type limiterBundle struct {
	mu       sync.Mutex
	clock    time.Time
	recorded []string
}

func (b *limiterBundle) advance(d time.Duration) {
	b.mu.Lock()
	b.clock = b.clock.Add(d)
	b.mu.Unlock()
}

func (b *limiterBundle) records() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.recorded...)
}

func newLimiterBundle(t *testing.T) (*progressLimiter, *limiterBundle) {
	b := &limiterBundle{clock: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	p := newProgressLimiter(t.Context(), func(_ context.Context, data json.RawMessage) error {
		b.mu.Lock()
		b.recorded = append(b.recorded, string(data))
		b.mu.Unlock()
		return nil
	}, func(err error) { t.Errorf("deferred record: %v", err) })
	p.now = func() time.Time {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.clock
	}
	return p, b
}

func report(t *testing.T, p *progressLimiter, i int) {
	t.Helper()
	require.NoError(t, p.report(t.Context(), json.RawMessage(fmt.Sprint(i))))
}

// TestProgressBurstThenRate (50,000 reports once made 50,000 events): a burst is
// recorded as it comes; past it, the reports of one interval are coalesced into
// their newest; the last report is recorded at the end.
func TestProgressBurstThenRate(t *testing.T) {
	t.Parallel()
	p, b := newLimiterBundle(t)
	for i := 1; i <= 500; i++ {
		report(t, p, i)
	}
	want := []string{"1", "2", "3", "4", "5", "6", "7", "8", "9", "10"}
	require.Equal(t, want, b.records(), "the burst, then nothing until a token is due")

	b.advance(progressInterval)
	report(t, p, 501)
	report(t, p, 502)
	want = append(want, "501")
	require.Equal(t, want, b.records(), "one per interval: the newest report when a token is due")

	b.advance(progressInterval / 2)
	report(t, p, 503)
	require.Equal(t, want, b.records())
	require.NoError(t, p.end())
	want = append(want, "503")
	require.Equal(t, want, b.records(), "the last report is never lost")

	report(t, p, 504)
	require.NoError(t, p.end())
	require.Equal(t, want, b.records(), "nothing after the end")
}

// TestProgressTotal: however slowly reports come, an attempt records at most
// maxProgressEvents, the last of them its last report.
func TestProgressTotal(t *testing.T) {
	t.Parallel()
	p, b := newLimiterBundle(t)
	const n = 3 * maxProgressEvents
	for i := 1; i <= n; i++ {
		report(t, p, i)
		b.advance(progressInterval)
	}
	require.NoError(t, p.end())
	got := b.records()
	require.Len(t, got, maxProgressEvents)
	require.Equal(t, "1", got[0])
	require.Equal(t, fmt.Sprint(maxProgressEvents-1), got[maxProgressEvents-2])
	require.Equal(t, fmt.Sprint(n), got[maxProgressEvents-1], "the last event holds the last report")
}

// TestProgressBytes: large reports stop being recorded past maxProgressBytes;
// the last one is still recorded at the end.
func TestProgressBytes(t *testing.T) {
	t.Parallel()
	p, b := newLimiterBundle(t)
	big := func(i int) json.RawMessage {
		return json.RawMessage(fmt.Sprintf(`{"i":%d,"pad":"%s"}`, i, strings.Repeat("x", 1<<20)))
	}
	for i := 1; i <= 20; i++ {
		require.NoError(t, p.report(t.Context(), big(i)))
		b.advance(progressInterval)
	}
	require.NoError(t, p.end())
	got := b.records()
	require.Len(t, got, maxProgressBytes/(1<<20)) // 7 fit within 8 MiB, and the last one
	total := 0
	for _, r := range got[:len(got)-1] {
		total += len(r)
	}
	require.LessOrEqual(t, total, maxProgressBytes)
	require.Contains(t, got[len(got)-1], `{"i":20,`)
}

// TestProgressDeferred: a report held back by the rate is recorded once its
// interval is up, without waiting for another report or the end.
func TestProgressDeferred(t *testing.T) {
	t.Parallel()
	p, b := newLimiterBundle(t)
	for i := 1; i <= progressBurst+3; i++ {
		report(t, p, i)
	}
	b.advance(progressInterval)
	// Waiting for the limiter's timer (a second of the real clock) to record
	// the newest report.
	require.Eventually(t, func() bool { return len(b.records()) == progressBurst+1 }, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, fmt.Sprint(progressBurst+3), b.records()[progressBurst])
	require.NoError(t, p.end())
	require.Len(t, b.records(), progressBurst+1, "nothing was left waiting")
}
