package bundle

import (
	"fmt"
	"time"

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
	// Singleton keeps at most one unfinished run of the workflow per key: an
	// event whose key has one is skipped, cancels it, or is queued (mode).
	Singleton *Singleton `yaml:"singleton,omitempty" json:"singleton,omitempty"`
	// Debounce starts one run per key once its events have stopped for period,
	// with the last event's input.
	Debounce *Debounce `yaml:"debounce,omitempty" json:"debounce,omitempty"`
	// Batch starts one run per up to max events of a key, or timeout after the
	// first, with input {"events": [...]}.
	Batch *Batch `yaml:"batch,omitempty" json:"batch,omitempty"`
}

// The modes of a singleton trigger.
const (
	SingletonSkip        = "skip"
	SingletonCancelOther = "cancel_other"
	SingletonQueue       = "queue"
)

// Flow control limits of a trigger (docs/events.md).
const (
	// MaxBatch bounds a batch's max.
	MaxBatch = 1000
	// MaxFlowPeriod bounds a debounce's period and max_wait and a batch's
	// timeout.
	MaxFlowPeriod = 30 * 24 * time.Hour
)

// Singleton is a trigger's at most one unfinished run per key of its workflow
// (docs/events.md).
type Singleton struct {
	// Key is a CEL expression over event giving the key (a string or an
	// integer); unset: one key for the whole workflow. Keys are the workflow's:
	// its triggers with the same key share the one run.
	Key string `yaml:"key,omitempty" json:"key,omitempty"`
	// Mode is what an event does when its key has an unfinished run: skip
	// (default: it starts nothing, and says so), cancel_other (it cancels that
	// run and starts its own) or queue (its run starts once the key's run has
	// ended, one at a time, in arrival order).
	Mode string `yaml:"mode,omitempty" json:"mode,omitempty"`
}

// Debounce is a trigger's one run per key after the key's events have stopped
// for Period, with the last event's input (docs/events.md).
type Debounce struct {
	// Key is a CEL expression over event giving the key (a string or an
	// integer); unset: one key for the trigger.
	Key string `yaml:"key,omitempty" json:"key,omitempty"`
	// Period is how long a key must be quiet before its run starts; required.
	Period Duration `yaml:"period" json:"period"`
	// MaxWait bounds how long after the first event of a window its run starts,
	// however busy the key; at least period. Unset: no bound.
	MaxWait *Duration `yaml:"max_wait,omitempty" json:"max_wait,omitempty"`
}

// Batch is a trigger's one run per up to Max events of a key, or Timeout after
// the first, with input {"events": [event, ...]} in arrival order
// (docs/events.md).
type Batch struct {
	// Max is the most events a run gets: 1 to 1000.
	Max int `yaml:"max" json:"max"`
	// Timeout is how long after its first event a batch starts its run with
	// fewer than Max events; required.
	Timeout Duration `yaml:"timeout" json:"timeout"`
	// Key is a CEL expression over event giving the key (a string or an
	// integer); unset: one batch at a time for the trigger.
	Key string `yaml:"key,omitempty" json:"key,omitempty"`
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
		v.triggerFlow(f, &t)
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

// triggerFlow validates a trigger's singleton, debounce and batch (f names the
// trigger).
func (v *validator) triggerFlow(f string, t *Trigger) {
	n := 0
	for _, set := range []bool{t.Singleton != nil, t.Debounce != nil, t.Batch != nil} {
		if set {
			n++
		}
	}
	if n > 1 {
		v.add("", f, "a trigger has at most one of singleton, debounce and batch")
	}
	if s := t.Singleton; s != nil {
		v.eventExpr(f+".singleton.key", s.Key)
		switch s.Mode {
		case "", SingletonSkip, SingletonCancelOther, SingletonQueue:
		default:
			v.add("", f+".singleton.mode", "mode must be skip, cancel_other or queue, not %q", s.Mode)
		}
	}
	period := func(field string, d time.Duration) {
		if d <= 0 || d > MaxFlowPeriod {
			v.add("", field, "%s: must be > 0 and at most %s (30 days)", Duration(d), Duration(MaxFlowPeriod))
		}
	}
	if d := t.Debounce; d != nil {
		v.eventExpr(f+".debounce.key", d.Key)
		period(f+".debounce.period", d.Period.Std())
		if d.MaxWait != nil {
			period(f+".debounce.max_wait", d.MaxWait.Std())
			if d.MaxWait.Std() < d.Period.Std() {
				v.add("", f+".debounce.max_wait", "max_wait %s is shorter than period %s: a window would end before it could be quiet", d.MaxWait, d.Period)
			}
		}
	}
	if b := t.Batch; b != nil {
		v.eventExpr(f+".batch.key", b.Key)
		if b.Max < 1 || b.Max > MaxBatch {
			v.add("", f+".batch.max", "max %d: must be 1 to %d events", b.Max, MaxBatch)
		}
		period(f+".batch.timeout", b.Timeout.Std())
		if t.Input != "" {
			v.add("", f+".input", "a batch trigger's run gets {\"events\": [...]}, each event whole: input does not apply")
		}
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
