package cairn

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseMetrics(t *testing.T) {
	t.Parallel()
	in := `# HELP cairn_attempts_total Attempts finished.
# TYPE cairn_attempts_total counter
cairn_attempts_total{outcome="succeeded"} 10
cairn_attempts_total{outcome="failed"} 2
cairn_lease_lost_total{op="finish a b"} 1 1700000000
process_cpu_seconds_total 3.5
go_gc_duration_seconds{quantile="0.5"} 1e-05
bad_line{ 1
`
	got, err := parseMetrics(strings.NewReader(in), false)
	require.NoError(t, err)
	require.Equal(t, 12.0, got["cairn_attempts_total"])
	require.Equal(t, 1.0, got["cairn_lease_lost_total"])
	require.Equal(t, 3.5, got["process_cpu_seconds_total"])
	require.InDelta(t, 1e-5, got["go_gc_duration_seconds"], 1e-12)
	require.NotContains(t, got, "bad_line")

	apart, err := parseMetrics(strings.NewReader(in+"cairn_exec_phase_seconds_sum{phase=\"run\"} 0.5\n"), true)
	require.NoError(t, err)
	require.Equal(t, 10.0, apart["cairn_attempts_total|succeeded"])
	require.Equal(t, 3.5, apart["process_cpu_seconds_total|"])
	require.Equal(t, 0.5, apart["cairn_exec_phase_seconds|run_sum"])
}

func TestFanoutBundle(t *testing.T) {
	t.Parallel()
	y := string(FanoutBundle(3)["cairn.yaml"].Body)
	require.Contains(t, y, "{key: p0003, needs: [root], builtin: noop}")
	require.Contains(t, y, "{key: join, needs: [p0001, p0002, p0003], builtin: noop}")
}
