package bundle

import (
	"fmt"

	"github.com/cairnrun/cairn/expr"
)

// KindWaitForEvent is a step that waits for a received event (POST /v1/events)
// whose name it names and whose match expression holds; its output is the event.
const KindWaitForEvent Kind = "wait_for_event"

// Event limits.
const (
	// MaxTriggers bounds a workflow's triggers, and MaxCancelOn its cancel_on
	// entries.
	MaxTriggers = 32
	MaxCancelOn = 32
)

// Trigger starts a run of the workflow's latest version for every received event
// of its name whose if holds (docs/events.md).
type Trigger struct {
	// Event is the event's name: ^[a-z0-9][a-z0-9_.-]{0,62}$.
	Event string `yaml:"event" json:"event"`
	// If is a CEL condition over event; unset: every event of that name.
	If string `yaml:"if,omitempty" json:"if,omitempty"`
	// Input is a CEL expression over event giving the run's input; unset: the
	// event's data.
	Input string `yaml:"input,omitempty" json:"input,omitempty"`
	// Labels of the runs it starts.
	Labels map[string]string `yaml:"labels,omitempty" json:"labels,omitempty"`
	// Priority of the runs it starts: 0..9; unset: the workflow's.
	Priority *int `yaml:"priority,omitempty" json:"priority,omitempty"`
}

// CancelOn cancels an unfinished run of the workflow when an event of its name
// arrives whose match (a CEL condition over event and input, the run's input)
// holds; unset match: every event of that name.
type CancelOn struct {
	Event string `yaml:"event" json:"event"`
	Match string `yaml:"match,omitempty" json:"match,omitempty"`
}

// WaitForEventSpec is a wait_for_event step: it waits, suspended, for an event of
// its name whose match (a CEL condition over event and input) holds, received
// after its run was created; its output is the event ({id, name, data,
// received_at}).
type WaitForEventSpec struct {
	Event string `yaml:"event" json:"event"`
	Match string `yaml:"match,omitempty" json:"match,omitempty"`
	// Timeout: how long the step waits at most, up to a year; unset: forever.
	Timeout *Duration `yaml:"timeout,omitempty" json:"timeout,omitempty"`
	// OnTimeout is fail (default: the step fails with code timeout) or continue
	// (it succeeds with a null output).
	OnTimeout string `yaml:"on_timeout,omitempty" json:"on_timeout,omitempty"`
}

// WaitForEventDefinition is a normalized wait_for_event.
type WaitForEventDefinition struct {
	Event string `json:"event"`
	Match string `json:"match,omitempty"`
	// Timeout and TimeoutMS are unset (0) for no timeout.
	Timeout   *Duration `json:"timeout,omitempty"`
	TimeoutMS int64     `json:"timeout_ms,omitempty"`
	// OnTimeout is fail or continue.
	OnTimeout string `json:"on_timeout"`
}

// ValidEventName reports whether name is an event's name.
func ValidEventName(name string) bool { return reSignalName.MatchString(name) }

// events validates the manifest's triggers and cancel_on.
func (v *validator) events(m *Manifest) {
	if len(m.Triggers) > MaxTriggers {
		v.add("", "triggers", "%d triggers, over the limit of %d per workflow", len(m.Triggers), MaxTriggers)
	}
	for i, t := range m.Triggers {
		f := fmt.Sprintf("triggers[%d]", i)
		v.eventName("", f+".event", t.Event)
		v.eventExpr(f+".if", t.If)
		v.eventExpr(f+".input", t.Input)
		if p := t.Priority; p != nil && (*p < MinPriority || *p > MaxPriority) {
			v.add("", f+".priority", "priority %d: must be %d to %d", *p, MinPriority, MaxPriority)
		}
	}
	if len(m.CancelOn) > MaxCancelOn {
		v.add("", "cancel_on", "%d cancel_on entries, over the limit of %d per workflow", len(m.CancelOn), MaxCancelOn)
	}
	for i, c := range m.CancelOn {
		f := fmt.Sprintf("cancel_on[%d]", i)
		v.eventName("", f+".event", c.Event)
		v.eventExpr(f+".match", c.Match)
	}
}

// waitForEvent validates a wait_for_event step.
func (v *validator) waitForEvent(key, f string, w *WaitForEventSpec) {
	v.eventName(key, f+".wait_for_event.event", w.Event)
	if w.Match != "" {
		if err := expr.EventEnv.Check(w.Match); err != nil {
			v.add(key, f+".wait_for_event.match", "bad expression: %v", err)
		}
	}
	if w.Timeout != nil {
		if d := w.Timeout.Std(); d <= 0 || d > MaxSleep {
			v.add(key, f+".wait_for_event.timeout", "timeout %s: must be > 0 and at most %s (a year)", w.Timeout, Duration(MaxSleep))
		}
	}
	switch w.OnTimeout {
	case "", "fail", "continue":
	default:
		v.add(key, f+".wait_for_event.on_timeout", "on_timeout must be fail or continue, not %q", w.OnTimeout)
	}
}

func (v *validator) eventName(key, field, name string) {
	switch {
	case name == "":
		v.add(key, field, "required")
	case !ValidEventName(name):
		v.add(key, field, "event name %q must match %s", name, reSignalName)
	}
}

func (v *validator) eventExpr(field, src string) {
	if src == "" {
		return
	}
	if err := expr.EventEnv.Check(src); err != nil {
		v.add("", field, "bad expression: %v", err)
	}
}

// normalizeWaitForEvent fills d for a wait_for_event step; false for other steps.
func normalizeWaitForEvent(s *Step, d *StepDefinition) bool {
	w := s.WaitForEvent
	if w == nil {
		return false
	}
	d.Kind = KindWaitForEvent
	def := &WaitForEventDefinition{Event: w.Event, Match: w.Match, OnTimeout: w.OnTimeout}
	if def.OnTimeout == "" {
		def.OnTimeout = "fail"
	}
	if w.Timeout != nil {
		t := *w.Timeout
		def.Timeout, def.TimeoutMS = &t, t.Std().Milliseconds()
	}
	d.WaitForEvent = def
	return true
}
