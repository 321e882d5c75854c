package runtime

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/bundle"
)

func TestRetryDelay(t *testing.T) {
	t.Parallel()
	policy := func(b bundle.Backoff, delay, maxDelay time.Duration, jitter float64) bundle.RetryDefinition {
		return bundle.RetryDefinition{MaxAttempts: 10, Backoff: b, Delay: bundle.Duration(delay), MaxDelay: bundle.Duration(maxDelay), Jitter: jitter}
	}
	tests := []struct {
		name string
		p    bundle.RetryDefinition
		n    int
		rnd  float64
		want time.Duration
	}{
		{name: "fixed", p: policy(bundle.BackoffFixed, time.Second, time.Hour, 0), n: 3, want: time.Second},
		{name: "linear", p: policy(bundle.BackoffLinear, 2*time.Second, time.Hour, 0), n: 3, want: 6 * time.Second},
		{name: "exponential", p: policy(bundle.BackoffExponential, time.Second, time.Hour, 0), n: 4, want: 8 * time.Second},
		{name: "capped", p: policy(bundle.BackoffExponential, time.Second, 5*time.Second, 0), n: 10, want: 5 * time.Second},
		{name: "jitter", p: policy(bundle.BackoffFixed, time.Second, time.Hour, 0.5), n: 1, rnd: 0.5, want: 1250 * time.Millisecond},
		{name: "jitter capped", p: policy(bundle.BackoffFixed, time.Second, time.Second, 0.5), n: 1, rnd: 0.9, want: time.Second},
		{name: "huge exponent", p: policy(bundle.BackoffExponential, time.Second, 0, 0), n: 100, want: time.Duration(1<<63 - 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, retryDelay(tt.p, tt.n, tt.rnd))
		})
	}
}
