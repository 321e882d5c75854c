package bundle

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/cairnrun/cairn/expr"
)

// Map bounds.
const (
	// DefaultMapParallel is a map's max_parallel when unset.
	DefaultMapParallel = 10
	// MaxMapParallel bounds max_parallel.
	MaxMapParallel = 10000
)

// MapSpec runs a step once per item of a list (docs/functions.md, "Maps"): `map: {over,
// max_parallel, tolerate_failures}` on an exec, http, lambda, builtin or workflow
// step. Each instance sees `item` and `index` in its envelope (and expressions).
type MapSpec struct {
	// Over is a CEL expression giving a list, or a $blob reference (an upstream
	// step's large output) holding a JSON array or JSON Lines.
	Over string `yaml:"over" json:"over"`
	// MaxParallel bounds the instances unfinished (so running) at once: 1 to
	// MaxMapParallel; default DefaultMapParallel.
	MaxParallel int `yaml:"max_parallel,omitempty" json:"max_parallel,omitempty"`
	// TolerateFailures is how many instances may fail with the map still
	// succeeding: a count (3) or a percentage ("5%"); default 0.
	TolerateFailures Tolerance `yaml:"tolerate_failures,omitempty" json:"tolerate_failures,omitzero"`
}

// Tolerance is a count of failures, or a percentage of the items.
type Tolerance struct {
	Count   int64
	Percent float64
	// IsPercent says which one is set.
	IsPercent bool
	// bad keeps text that is neither, for validation to name.
	bad string
}

// IsZero reports no tolerance (0).
func (t Tolerance) IsZero() bool { return t.Count == 0 && t.Percent == 0 && t.bad == "" }

func (t *Tolerance) set(s string) {
	s = strings.TrimSpace(s)
	if p, ok := strings.CutSuffix(s, "%"); ok {
		if f, err := strconv.ParseFloat(strings.TrimSpace(p), 64); err == nil && f >= 0 && f <= 100 {
			*t = Tolerance{Percent: f, IsPercent: true}
			return
		}
	} else if n, err := strconv.ParseInt(s, 10, 64); err == nil && n >= 0 {
		*t = Tolerance{Count: n}
		return
	}
	*t = Tolerance{bad: s}
}

// UnmarshalYAML takes a count or a percentage ("5%").
func (t *Tolerance) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: map.tolerate_failures must be a count or a percentage (\"5%%\")", n.Line)}}
	}
	t.set(n.Value)
	return nil
}

// String is the count or the percentage.
func (t Tolerance) String() string {
	switch {
	case t.bad != "":
		return t.bad
	case t.IsPercent:
		return strconv.FormatFloat(t.Percent, 'f', -1, 64) + "%"
	}
	return strconv.FormatInt(t.Count, 10)
}

// MarshalYAML writes the count or the percentage.
func (t Tolerance) MarshalYAML() (any, error) {
	if t.IsPercent || t.bad != "" {
		return t.String(), nil
	}
	return t.Count, nil
}

// MarshalJSON writes a number, or a percentage string.
func (t Tolerance) MarshalJSON() ([]byte, error) {
	if t.IsPercent || t.bad != "" {
		return json.Marshal(t.String())
	}
	return json.Marshal(t.Count)
}

// UnmarshalJSON takes a number or a string.
func (t *Tolerance) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		t.set(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("tolerate_failures must be a count or a percentage: %w", err)
	}
	t.set(n.String())
	return nil
}

// MapDefinition is a normalized map.
type MapDefinition struct {
	Over        string `json:"over"`
	MaxParallel int    `json:"max_parallel"`
	// TolerateCount, or ToleratePercent when TolerateIsPercent.
	TolerateCount     int64   `json:"tolerate_count,omitempty"`
	ToleratePercent   float64 `json:"tolerate_percent,omitempty"`
	TolerateIsPercent bool    `json:"tolerate_is_percent,omitempty"`
}

// Tolerated reports whether failed failures of total items are tolerated.
func (m *MapDefinition) Tolerated(failed, total int64) bool {
	if m.TolerateIsPercent {
		return float64(failed)*100 <= m.ToleratePercent*float64(total)
	}
	return failed <= m.TolerateCount
}

// reDepsName finds the steps an expression reads through deps ("deps.split",
// "deps['split']").
var reDepsName = regexp.MustCompile(`\bdeps\s*(?:\.\s*([a-z0-9_]+)|\[\s*["']([a-z0-9_-]+)["']\s*\])`)

// mapSpec validates s's map (field f), if it has one.
func (v *validator) mapSpec(f string, s Step, kinds []string) {
	m := s.Map
	if m == nil {
		return
	}
	for _, k := range kinds {
		if k == "sleep" || k == "signal" {
			v.add(s.Key, f+".map", "map applies to exec, http, lambda, builtin and workflow steps, not %s", k)
		}
	}
	if strings.TrimSpace(m.Over) == "" {
		v.add(s.Key, f+".map.over", "map.over is empty: an expression giving a list, or a $blob of JSON (an array, or JSON Lines)")
	} else if err := expr.StepEnv.Check(m.Over); err != nil {
		v.add(s.Key, f+".map.over", "bad expression: %v", err)
	} else {
		for _, g := range reDepsName.FindAllStringSubmatch(m.Over, -1) {
			name := g[1] + g[2]
			if !slices.Contains(s.Needs, name) {
				v.add(s.Key, f+".map.over", "map.over reads deps.%s, but step %q is not upstream of %q: add it to needs", name, name, s.Key)
			}
		}
	}
	if m.MaxParallel < 0 || m.MaxParallel > MaxMapParallel {
		v.add(s.Key, f+".map.max_parallel", "max_parallel %d: must be 1 to %d", m.MaxParallel, MaxMapParallel)
	}
	if m.TolerateFailures.bad != "" {
		v.add(s.Key, f+".map.tolerate_failures", "tolerate_failures %q: a count (3) or a percentage (\"5%%\", 0 to 100)", m.TolerateFailures.bad)
	}
}

// normalizeMapSpec fills d.Map from s.
func normalizeMapSpec(s *Step, d *StepDefinition) {
	if s.Map == nil {
		return
	}
	m := &MapDefinition{Over: s.Map.Over, MaxParallel: s.Map.MaxParallel,
		TolerateCount: s.Map.TolerateFailures.Count, ToleratePercent: s.Map.TolerateFailures.Percent,
		TolerateIsPercent: s.Map.TolerateFailures.IsPercent}
	if m.MaxParallel == 0 {
		m.MaxParallel = DefaultMapParallel
	}
	d.Map = m
}

// InstanceKey is the key of the instance index of map step key: "key[index]".
func InstanceKey(key string, index int64) string {
	return key + "[" + strconv.FormatInt(index, 10) + "]"
}

// SplitInstanceKey returns the map step's key and the index of an instance key
// ("resize[17]" → "resize", 17, true); false for another key.
func SplitInstanceKey(key string) (string, int64, bool) {
	base, rest, ok := strings.Cut(key, "[")
	if !ok || !strings.HasSuffix(rest, "]") {
		return key, 0, false
	}
	i, err := strconv.ParseInt(strings.TrimSuffix(rest, "]"), 10, 64)
	if err != nil || i < 0 {
		return key, 0, false
	}
	return base, i, true
}
