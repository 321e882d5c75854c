package bundle

import (
	"encoding/json"
	"fmt"
	"regexp"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/cairnrun/cairn/expr"
)

// The step kinds that wait (docs/functions.md, "Waiting"): they run no function. A
// dispatcher that claims one suspends it at once (catalog.StepSuspend): it then
// holds no slot.
const (
	KindSleep  Kind = "sleep"
	KindSignal Kind = "signal"
)

// MaxSleep bounds a sleep's duration and a wait's timeout: a year (366 days).
const MaxSleep = 366 * 24 * time.Hour

// reSignalName is the syntax of a signal's name.
var reSignalName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

// SleepSpec is a sleep step: `sleep: 1h` (For, a duration) or
// `sleep: {until: "<CEL → RFC 3339>"}` (Until, evaluated when the step is ready).
type SleepSpec struct {
	For   *Duration
	Until string
}

// UnmarshalYAML takes a duration string or a mapping with until.
func (s *SleepSpec) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		var d Duration
		if err := d.UnmarshalYAML(n); err != nil {
			return err
		}
		s.For = &d
		return nil
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Value != "until" {
				return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: field %s not found in sleep (use a duration, or {until: \"<expression>\"})", k.Line, k.Value)}}
			}
			if v.Kind != yaml.ScalarNode || v.Tag != "!!str" {
				return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: sleep.until must be a string (an expression)", v.Line)}}
			}
			s.Until = v.Value
		}
		return nil
	}
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: sleep must be a duration (\"1h\") or {until: \"<expression>\"}", n.Line)}}
}

// MarshalYAML writes the form it was read from.
func (s SleepSpec) MarshalYAML() (any, error) {
	if s.For != nil {
		return s.For.String(), nil
	}
	return map[string]string{"until": s.Until}, nil
}

// MarshalJSON writes the form it was read from.
func (s SleepSpec) MarshalJSON() ([]byte, error) {
	if s.For != nil {
		return json.Marshal(s.For.String())
	}
	return json.Marshal(map[string]string{"until": s.Until})
}

// UnmarshalJSON takes a duration string or {"until": "…"}.
func (s *SleepSpec) UnmarshalJSON(b []byte) error {
	var d Duration
	if err := d.UnmarshalJSON(b); err == nil {
		s.For = &d
		return nil
	}
	var m struct {
		Until string `json:"until"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("sleep must be a duration or {until}: %w", err)
	}
	s.Until = m.Until
	return nil
}

// SignalSpec is a signal step: it waits for POST /v1/runs/{id}/signals/{name}; its
// output is the signal's payload.
type SignalSpec struct {
	// Name of the signal: ^[a-z0-9][a-z0-9_.-]{0,62}$.
	Name string `yaml:"name" json:"name"`
	// Timeout: how long the step waits at most, up to a year; unset: forever.
	Timeout *Duration `yaml:"timeout,omitempty" json:"timeout,omitempty"`
	// OnTimeout is fail (default: the step fails with code timeout) or continue
	// (it succeeds with a null output).
	OnTimeout string `yaml:"on_timeout,omitempty" json:"on_timeout,omitempty"`
}

// SleepDefinition is a normalized sleep: Duration (and DurationMS) or Until.
type SleepDefinition struct {
	Duration   *Duration `json:"duration,omitempty"`
	DurationMS int64     `json:"duration_ms,omitempty"`
	Until      string    `json:"until,omitempty"`
}

// SignalDefinition is a normalized signal wait.
type SignalDefinition struct {
	Name string `json:"name"`
	// Timeout and TimeoutMS are unset (0) for no timeout.
	Timeout   *Duration `json:"timeout,omitempty"`
	TimeoutMS int64     `json:"timeout_ms,omitempty"`
	// OnTimeout is fail or continue.
	OnTimeout string `json:"on_timeout"`
}

// waitKinds validates the wait kinds of s and returns the names of those it sets.
func (v *validator) waitKinds(f string, s Step) []string {
	var kinds []string
	if s.Sleep != nil {
		kinds = append(kinds, "sleep")
		switch sl := s.Sleep; {
		case sl.For != nil && sl.Until != "":
			v.add(s.Key, f+".sleep", "set a duration or until, not both")
		case sl.For != nil:
			if d := sl.For.Std(); d <= 0 || d > MaxSleep {
				v.add(s.Key, f+".sleep", "sleep %s: must be > 0 and at most %s (a year)", sl.For, Duration(MaxSleep))
			}
		case sl.Until == "":
			v.add(s.Key, f+".sleep.until", "sleep.until is empty: an expression giving a time (RFC 3339)")
		default:
			if err := expr.StepEnv.Check(sl.Until); err != nil {
				v.add(s.Key, f+".sleep.until", "bad expression: %v", err)
			}
		}
	}
	if s.WaitForEvent != nil {
		kinds = append(kinds, "wait_for_event")
		v.waitForEvent(s.Key, f, s.WaitForEvent)
	}
	if s.Signal != nil {
		kinds = append(kinds, "signal")
		sg := s.Signal
		if !reSignalName.MatchString(sg.Name) {
			v.add(s.Key, f+".signal.name", "signal name %q must match %s", sg.Name, reSignalName)
		}
		if sg.Timeout != nil {
			if d := sg.Timeout.Std(); d <= 0 || d > MaxSleep {
				v.add(s.Key, f+".signal.timeout", "timeout %s: must be > 0 and at most %s (a year)", sg.Timeout, Duration(MaxSleep))
			}
		}
		switch sg.OnTimeout {
		case "", "fail", "continue":
		default:
			v.add(s.Key, f+".signal.on_timeout", "on_timeout must be fail or continue, not %q", sg.OnTimeout)
		}
	}
	return kinds
}

// normalizeWait fills d's kind and wait for a waiting step; false for other steps.
func normalizeWait(s *Step, d *StepDefinition) bool {
	switch {
	case s.Sleep != nil:
		d.Kind = KindSleep
		sl := &SleepDefinition{Until: s.Sleep.Until}
		if s.Sleep.For != nil {
			dur := *s.Sleep.For
			sl.Duration, sl.DurationMS = &dur, dur.Std().Milliseconds()
		}
		d.Sleep = sl
		return true
	case s.Signal != nil:
		d.Kind = KindSignal
		sg := &SignalDefinition{Name: s.Signal.Name, OnTimeout: s.Signal.OnTimeout}
		if sg.OnTimeout == "" {
			sg.OnTimeout = "fail"
		}
		if s.Signal.Timeout != nil {
			t := *s.Signal.Timeout
			sg.Timeout, sg.TimeoutMS = &t, t.Std().Milliseconds()
		}
		d.Signal = sg
		return true
	}
	return false
}

// Waits reports whether steps of kind k wait instead of running a function.
func (k Kind) Waits() bool {
	return k == KindSleep || k == KindSignal || k == KindApproval || k == KindWaitForEvent
}

// SignalNames returns the names of the signals the definition's steps wait for.
func (d *Definition) SignalNames() []string {
	var out []string
	for i := range d.Steps {
		if s := d.Steps[i].Signal; s != nil {
			out = append(out, s.Name)
		}
	}
	return out
}
