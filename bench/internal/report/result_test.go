package report

import (
	"bytes"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/bench/internal/proc"
)

func TestPercentile(t *testing.T) {
	t.Parallel()
	xs := []float64{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
	tests := []struct {
		name string
		p    float64
		want float64
	}{
		{name: "p50", p: 50, want: 5},
		{name: "p90", p: 90, want: 9},
		{name: "p99", p: 99, want: 10},
		{name: "max", p: 100, want: 10},
		{name: "min", p: 0, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, Percentile(xs, tt.p))
		})
	}
	require.True(t, math.IsNaN(Percentile(nil, 50)))
}

func TestTableMarksGoals(t *testing.T) {
	t.Parallel()
	r := New("demo", proc.Machine{}, nil)
	r.Set("steps_per_s", 1500)
	r.AtLeast("steps_per_s", 2000)
	r.Set("p50_ms", 3)
	r.AtMost("p50_ms", 5)
	r.Set("nan", math.NaN()) // dropped
	var buf bytes.Buffer
	Table(&buf, []*Result{r})
	out := buf.String()
	require.Contains(t, out, "≥ 2000 NOT MET")
	require.Contains(t, out, "≤ 5.00 met")
	require.NotContains(t, out, "nan")
	require.Equal(t, 2000.0, r.Goals["steps_per_s_min"])
	require.Equal(t, 5.0, r.Goals["p50_ms_max"])
}
