package runner

import (
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseFlags(t *testing.T) {
	t.Parallel()
	env := func(quick string) func(string) string {
		return func(k string) string {
			if k == "BENCH_QUICK" {
				return quick
			}
			return ""
		}
	}
	tests := []struct {
		name        string
		args        []string
		quick       string
		wantRuns    int
		wantLatency int
		wantFsync   bool
		wantResults string
		wantErr     bool
	}{
		{name: "full", wantRuns: 2000, wantLatency: 50, wantFsync: true, wantResults: "bench/results"},
		{name: "quick from env", quick: "1", wantRuns: 200, wantLatency: 10, wantResults: "bench/results-quick"},
		{name: "explicit flag wins over quick", quick: "1", args: []string{"-throughput-runs", "300"}, wantRuns: 300, wantLatency: 10, wantResults: "bench/results-quick"},
		{name: "unknown scenario", args: []string{"-scenarios", "nope"}, wantErr: true},
		{name: "zero scale", args: []string{"-latency-runs", "0"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := ParseFlags(tt.args, env(tt.quick), io.Discard)
			if tt.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.wantRuns, cfg.Scale.ThroughputRuns)
			require.Equal(t, tt.wantLatency, cfg.Scale.LatencyRuns)
			require.Equal(t, tt.wantFsync, cfg.Scale.FsyncTest)
			require.Equal(t, tt.wantResults, cfg.ResultsDir)
			require.Len(t, cfg.Scenarios, len(allScenarios))
		})
	}
}
