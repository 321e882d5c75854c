package testrun

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBrokenMock: a mock that answers other than the case expects fails the
// case with a message naming the step and the expectation.
func TestBrokenMock(t *testing.T) {
	t.Parallel()
	r := runnerFor(t, "testdata/orders", nil)
	c, err := ParseCase([]byte(`
mocks:
  charge: {error: {message: "card declined", code: card_declined, retryable: false}}
expect:
  status: failed
  steps:
    charge: succeeded
  outputs:
    charge.id: ch_1
`), "broken")
	require.NoError(t, err)
	res := r.Run(context.Background(), c)
	require.NoError(t, res.Err)
	require.False(t, res.Passed())
	got := strings.Join(res.Failures, "\n")
	require.Contains(t, got, "step charge: expected status succeeded, got failed (error code card_declined)")
	require.Contains(t, got, "outputs.charge.id: step charge has no output (status failed)")
}

// TestUnmockedHTTPRefused: an http step without a mock is refused before the
// case runs, naming the step, unless the network is allowed.
func TestUnmockedHTTPRefused(t *testing.T) {
	t.Parallel()
	r := runnerFor(t, "testdata/orders", nil)
	c, err := ParseCase([]byte(`expect: {status: succeeded}`), "unmocked")
	require.NoError(t, err)
	res := r.Run(context.Background(), c)
	require.ErrorContains(t, res.Err, "step charge (http) has no mock: http and lambda steps must be mocked, or run with --allow-network")
}
