package testrun

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestYearlyCases(t *testing.T) {
	t.Parallel()
	r := runnerFor(t, "testdata/yearly", nil)
	cases, err := LoadCases("testdata/yearly")
	require.NoError(t, err)
	for _, c := range cases {
		res := r.Run(context.Background(), c)
		require.NoError(t, res.Err, c.Name)
		require.Empty(t, res.Failures, c.Name)
		t.Logf("%s: wall %s, virtual %s", c.Name, res.Wall, Duration(res.Virtual))
	}
}
