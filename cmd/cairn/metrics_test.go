package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMetricsAfterRuns: after runs, GET /metrics has the queue wait and attempt
// duration histograms of the workflow with a sample per attempt, and the catalog's
// gauges; every series the sample Grafana dashboard (docs/grafana-dashboard.json)
// queries is served.
func TestMetricsAfterRuns(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cairn.yaml"), []byte(
		"name: metered\nsteps:\n  - {key: a, builtin: echo}\n  - {key: b, needs: [a], builtin: echo}\n"), 0o644))
	b.mustCLI(t, "deploy", dir)
	for range 3 {
		id := strings.TrimSpace(b.mustCLI(t, "run", "start", "metered"))
		require.Contains(t, b.mustCLI(t, "run", "watch", id), "run.succeeded")
	}

	resp, err := http.Get(b.server + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	text := string(body)
	value := func(series string) float64 {
		t.Helper()
		for line := range strings.Lines(text) {
			if rest, ok := strings.CutPrefix(line, series+" "); ok {
				v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
				require.NoError(t, err, line)
				return v
			}
		}
		t.Fatalf("no series %s in /metrics", series)
		return 0
	}
	assert.Equal(t, 6.0, value(`cairn_queue_wait_seconds_count{workflow="metered"}`), "a sample per attempt")
	assert.GreaterOrEqual(t, value(`cairn_queue_wait_seconds_sum{workflow="metered"}`), 0.0)
	assert.Equal(t, 6.0, value(`cairn_attempt_duration_seconds_count{outcome="succeeded",workflow="metered"}`))
	assert.Positive(t, value(`cairn_attempt_duration_seconds_sum{outcome="succeeded",workflow="metered"}`))
	assert.Equal(t, 6.0, value(`cairn_attempt_duration_seconds_bucket{outcome="succeeded",workflow="metered",le="+Inf"}`))
	// Every run ended: nothing is queued, running or waiting.
	assert.Zero(t, value("cairn_steps_ready"))
	assert.Zero(t, value("cairn_steps_oldest_ready_seconds"))
	assert.Zero(t, value("cairn_steps_running"))
	assert.Zero(t, value("cairn_steps_suspended"))
	assert.Zero(t, value(`cairn_pool_demand{tags=""}`), "the untagged pool is idle")

	raw, err := os.ReadFile("../../docs/grafana-dashboard.json")
	require.NoError(t, err)
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash))
	require.NotEmpty(t, dash.Panels)
	name := regexp.MustCompile(`cairn_[a-z_]+`)
	for _, p := range dash.Panels {
		require.NotEmpty(t, p.Targets, p.Title)
		for _, tg := range p.Targets {
			for _, m := range name.FindAllString(tg.Expr, -1) {
				if m == "cairn_lease_lost_total" {
					continue // a counter by operation: served once a loss is counted
				}
				if strings.HasPrefix(m, "cairn_limit") {
					continue // by limit: served while a limit is in use or set (runtime's TestLimitGauges)
				}
				assert.Contains(t, text, "\n"+m, "panel %q queries %s, which /metrics does not serve", p.Title, m)
			}
		}
	}
}
