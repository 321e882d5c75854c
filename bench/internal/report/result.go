// Package report holds a scenario's result, writes it as JSON and prints the table.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cairnrun/cairn/bench/internal/proc"
)

// Result is one scenario's file, bench/results/<scenario>.json.
type Result struct {
	Scenario string            `json:"scenario"`
	Machine  proc.Machine      `json:"machine"`
	Versions map[string]string `json:"versions"`
	// Settings state the load and the configuration (any JSON value per name).
	Settings map[string]any `json:"settings"`
	// Metrics are the figures; names carry their unit (_ms, _s, _mib, _per_s).
	Metrics map[string]float64 `json:"metrics"`
	// Goals: name is the metric's name plus _min (the metric should be at least the
	// value) or _max (at most).
	Goals map[string]float64 `json:"goals"`
	// Wall is how long the scenario took, setup included, in seconds.
	WallSeconds float64 `json:"wall_s"`
	// Error is set when the scenario could not finish; the metrics are then partial.
	Error string `json:"error,omitempty"`

	started time.Time
}

// New starts the result of a scenario.
func New(scenario string, m proc.Machine, versions map[string]string) *Result {
	m.LoadAverageStart = proc.LoadAverage()
	return &Result{
		Scenario: scenario, Machine: m, Versions: versions,
		Settings: map[string]any{}, Metrics: map[string]float64{}, Goals: map[string]float64{},
		started: time.Now(),
	}
}

// Set records a metric, rounded to a precision that fits its size.
func (r *Result) Set(name string, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return
	}
	r.Metrics[name] = round(v)
}

// AtLeast records the goal metric ≥ v.
func (r *Result) AtLeast(metric string, v float64) { r.Goals[metric+"_min"] = v }

// AtMost records the goal metric ≤ v.
func (r *Result) AtMost(metric string, v float64) { r.Goals[metric+"_max"] = v }

// Finish stamps the end of the scenario.
func (r *Result) Finish(err error) {
	r.Machine.LoadAverageEnd = proc.LoadAverage()
	r.WallSeconds = round(time.Since(r.started).Seconds())
	if err != nil {
		r.Error = err.Error()
	}
}

// Write stores the result as dir/<scenario>.json.
func (r *Result) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, r.Scenario+".json"), append(b, '\n'), 0o644)
}

func round(v float64) float64 {
	a := math.Abs(v)
	switch {
	case a >= 100:
		return math.Round(v*10) / 10
	case a >= 1:
		return math.Round(v*1000) / 1000
	default:
		return math.Round(v*1e5) / 1e5
	}
}

// Percentile returns the p-th percentile (0..100) of xs by nearest rank; NaN for none.
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[min(max(rank-1, 0), len(s)-1)]
}

// Table prints every metric of every result, each beside its goal when it has one.
func Table(w io.Writer, results []*Result) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tMETRIC\tVALUE\tGOAL\t")
	for _, r := range results {
		for _, n := range slices.Sorted(maps.Keys(r.Metrics)) {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", r.Scenario, n, format(r.Metrics[n]), goalText(r, n))
		}
		if r.Error != "" {
			fmt.Fprintf(tw, "%s\tERROR\t%s\t\t\n", r.Scenario, firstLine(r.Error))
		}
	}
	tw.Flush()
}

// Markdown prints the goal-bearing metrics (and the side-by-side figures) as a
// Markdown table, for the README.
func Markdown(w io.Writer, results []*Result) {
	fmt.Fprintln(w, "| scenario | metric | value | goal |")
	fmt.Fprintln(w, "|---|---|---:|---|")
	for _, r := range results {
		for _, n := range slices.Sorted(maps.Keys(r.Metrics)) {
			fmt.Fprintf(w, "| %s | %s | %s | %s |\n", r.Scenario, n, format(r.Metrics[n]), goalText(r, n))
		}
		if r.Error != "" {
			fmt.Fprintf(w, "| %s | error | %s | |\n", r.Scenario, firstLine(r.Error))
		}
	}
}

func goalText(r *Result, metric string) string {
	if g, ok := r.Goals[metric+"_min"]; ok {
		mark := "met"
		if r.Metrics[metric] < g {
			mark = "NOT MET"
		}
		return fmt.Sprintf("≥ %s %s", format(g), mark)
	}
	if g, ok := r.Goals[metric+"_max"]; ok {
		mark := "met"
		if r.Metrics[metric] > g {
			mark = "NOT MET"
		}
		return fmt.Sprintf("≤ %s %s", format(g), mark)
	}
	return ""
}

func format(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return s
}
