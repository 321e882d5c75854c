package runtime

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A dispatcher whose handlers start late runs fewer attempts at once, down to a
// floor, and back up to its concurrency as starts are prompt again.
func TestAdmissionFollowsStartLatency(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	a := newAdmission(128, time.Second)
	a.now = func() time.Time { return now }

	require.Equal(t, 128, a.allowed(0), "a machine that starts promptly never sees it")
	require.Equal(t, 28, a.allowed(100))
	require.Equal(t, 128, a.observe(200*time.Millisecond), "at the concurrency already")

	// Late starts cut the limit by a quarter, at most once a second: the attempts
	// claimed before a cut start late too.
	require.Equal(t, 96, a.observe(3*time.Second))
	require.Equal(t, 96, a.observe(3*time.Second))
	require.Equal(t, 0, a.allowed(100), "100 running: no claim until some end")
	now = now.Add(time.Second)
	require.Equal(t, 72, a.observe(2*time.Second))
	for range 20 {
		now = now.Add(time.Second)
		a.observe(5 * time.Second)
	}
	require.Equal(t, admissionFloor, a.current(), "never below the floor")

	// Prompt starts raise it by one each.
	require.Equal(t, admissionFloor+1, a.observe(10*time.Millisecond))
	require.Equal(t, admissionFloor+2, a.observe(10*time.Millisecond))

	// Attempts that start nothing new (they wait for each other) do not keep it
	// low: two seconds without a cut, it grows back by a quarter at each look.
	now = now.Add(admissionRecover)
	require.Equal(t, 7-2, a.allowed(2))
	for range 30 {
		now = now.Add(admissionRecover)
		a.allowed(0)
	}
	require.Equal(t, 128, a.current())

	// A concurrency under the floor is its own floor.
	small := newAdmission(2, time.Second)
	small.now = func() time.Time { return now }
	require.Equal(t, 2, small.observe(time.Minute))
}
