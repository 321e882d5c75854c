package runtime

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/cairnrun/cairn/bundle"
)

// retryDelay is the wait before the attempt after attempt n (n >= 1) failed:
// fixed = delay, linear = delay·n, exponential = delay·2^(n-1); capped at max_delay,
// then spread by up to jitter·delay (capped again). rnd in [0,1).
func retryDelay(p bundle.RetryDefinition, n int, rnd float64) time.Duration {
	if n < 1 {
		n = 1
	}
	base := float64(p.Delay.Std())
	var d float64
	switch p.Backoff {
	case bundle.BackoffLinear:
		d = base * float64(n)
	case bundle.BackoffExponential:
		d = base * math.Pow(2, float64(n-1))
	default:
		d = base
	}
	limit := float64(p.MaxDelay.Std())
	if limit > 0 && d > limit {
		d = limit
	}
	if p.Jitter > 0 {
		d += d * p.Jitter * rnd
		if limit > 0 && d > limit {
			d = limit
		}
	}
	if d > float64(math.MaxInt64) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(d)
}

func jitterRand() float64 { return rand.Float64() }
