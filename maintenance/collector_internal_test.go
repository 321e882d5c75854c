package maintenance

import (
	"crypto/rand"
	"testing"

	"github.com/stretchr/testify/require"
)

func randomKeys(n int) []markKey {
	keys := make([]markKey, n)
	for i := range keys {
		keys[i].kind = uint8(i % len(collectedKinds))
		_, _ = rand.Read(keys[i].digest[:])
	}
	return keys
}

// TestMarkSet: the mark never misses a key it was given (a missed key would be
// a referenced object deleted); it holds about 1 % of other keys by mistake
// (garbage kept one more pass), in about 1.2 bytes a key; and two passes' marks
// of the same keys err on different ones, so no garbage is kept for good.
func TestMarkSet(t *testing.T) {
	t.Parallel()
	const n = 200_000
	named, others := randomKeys(n), randomKeys(n)
	first, second := newMarkSet(n), newMarkSet(n)
	for range 2 { // a key named by several rows is listed once for each
		for _, k := range named {
			first.add(k)
			second.add(k)
		}
	}
	require.InDelta(t, n, first.n, n/100, "distinct keys counted")
	for _, k := range named {
		require.True(t, first.has(k))
		require.True(t, second.has(k))
	}
	wrong, both := 0, 0
	for _, k := range others {
		if first.has(k) {
			wrong++
			if second.has(k) {
				both++
			}
		}
	}
	rate := float64(wrong) / n
	require.InDelta(t, 0.01, rate, 0.005, "false positives")
	require.InDelta(t, 0.01, first.falsePositiveRate(), 0.002)
	require.Less(t, both, wrong/10, "the second pass errs on other keys")
	require.Less(t, float64(first.bytes())/n, 1.3, "bytes a key")
	t.Logf("false positives %.4f (%d, %d in both passes), %.2f bytes a key", rate, wrong, both, float64(first.bytes())/n)
}
