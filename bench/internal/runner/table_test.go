package runner

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/bench/internal/report"
)

// TestTableResults: table.md shows this run's scenarios and keeps the others'
// from their JSON files, in the scenarios' order; a run of one scenario no
// longer drops the rest of the table.
func TestTableResults(t *testing.T) {
	dir := t.TempDir()
	for _, r := range []*report.Result{
		{Scenario: "exec", Metrics: map[string]float64{"old": 1}},
		{Scenario: "api", Metrics: map[string]float64{"kept": 2}},
	} {
		b, err := json.Marshal(r)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, r.Scenario+".json"), b, 0o644))
	}
	ran := []*report.Result{{Scenario: "exec", Metrics: map[string]float64{"new": 3}}, {Scenario: "pgbench"}}
	got := tableResults(dir, ran)
	var names []string
	for _, r := range got {
		names = append(names, r.Scenario)
	}
	require.Equal(t, []string{"pgbench", "api", "exec"}, names)
	require.Equal(t, map[string]float64{"kept": 2}, got[1].Metrics)
	require.Equal(t, map[string]float64{"new": 3}, got[2].Metrics, "this run's result, not the file's")
}
