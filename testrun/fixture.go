package testrun

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/cairnrun/cairn/bundle"
)

// FixtureFormat is the format number of a Fixture (its cairn_fixture field).
const FixtureFormat = 1

// Fixture is a real run, exported for a replay (`cairn run export ID`,
// `cairn test --replay FILE`): its input, labels, and per step the digest of
// its definition, how it ended, its attempts' outcomes and its output. It
// holds what the catalog stored: outputs as they were kept (a secret never is:
// the runtime masks them), large outputs as their $blob reference (digest and
// size), never the bytes.
type Fixture struct {
	Format    int               `json:"cairn_fixture"`
	RunID     string            `json:"run_id"`
	Workflow  string            `json:"workflow"`
	Version   int               `json:"version"`
	Digest    string            `json:"digest,omitempty"`
	Status    string            `json:"status"`
	ErrorCode string            `json:"error_code,omitempty"`
	Input     json.RawMessage   `json:"input"`
	Labels    map[string]string `json:"labels,omitempty"`
	Steps     []FixtureStep     `json:"steps"`
}

// FixtureStep is one step of a Fixture.
type FixtureStep struct {
	Key string `json:"key"`
	// Definition is the digest of the step's definition (StepDigests).
	Definition string `json:"definition"`
	Status     string `json:"status"`
	SkipReason string `json:"skip_reason,omitempty"`
	// At is when the step ended, after the run's start.
	At *Duration `json:"at,omitempty"`
	// Attempts are the outcomes of its attempts that count (succeeded, failed,
	// timed out), in order.
	Attempts []FixtureAttempt `json:"attempts,omitempty"`
	// Output is the step's output as stored; OutputDigest its sha256.
	Output       json.RawMessage `json:"output,omitempty"`
	OutputDigest string          `json:"output_digest,omitempty"`
	// Signal is the name a signal step waited for (its output is the payload).
	Signal string `json:"signal,omitempty"`
	// Approval is true for an approval step.
	Approval bool `json:"approval,omitempty"`
}

// FixtureAttempt is the outcome of one attempt.
type FixtureAttempt struct {
	Status string          `json:"status"`
	Error  json.RawMessage `json:"error,omitempty"`
}

// Digest returns "sha256:" and the hex SHA-256 of b.
func Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// StepDigests returns the digest of every step's definition by key, the
// compensations (compensate-KEY) and on_failure steps included. A step's
// digest leaves out its compensation, which has its own.
func StepDigests(def *bundle.Definition) (map[string]string, error) {
	out := map[string]string{}
	add := func(s bundle.StepDefinition) error {
		s.Compensate = nil
		b, err := json.Marshal(s)
		if err != nil {
			return fmt.Errorf("step %s: %w", s.Key, err)
		}
		out[s.Key] = Digest(b)
		return nil
	}
	for _, s := range def.Steps {
		if err := add(s); err != nil {
			return nil, err
		}
		if s.Compensate != nil {
			if err := add(*s.Compensate); err != nil {
				return nil, err
			}
		}
	}
	for _, s := range def.OnFailure {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ReplayPlan says what a replay reuses and what it runs.
type ReplayPlan struct {
	// Reused are the steps answered with their recorded outcomes.
	Reused []string
	// Changed are the steps whose definition changed (or that are new);
	// Dependents the steps that run again because something upstream did.
	Changed    []string
	Dependents []string
	// Blobs are steps whose recorded output is a $blob, whose bytes a fixture
	// does not hold: they run again.
	Blobs []string
	// Maps are map steps: a fixture holds their outputs, not their instances',
	// so they run again.
	Maps []string
}

// Replay turns a fixture into a case for the runner's version: the recorded
// input, the signals and approvals at their recorded times, and the recorded
// outcomes as mocks of the steps whose definition did not change and whose
// upstream steps did not either; the other steps run their real handlers.
// The case expects each reused step of the DAG to end as it did. A fixture of another
// workflow, or naming steps the version lacks, is refused.
func (r *Runner) Replay(f *Fixture) (*Case, *ReplayPlan, error) {
	if f.Format != FixtureFormat {
		return nil, nil, fmt.Errorf("fixture format %d: this cairn reads format %d", f.Format, FixtureFormat)
	}
	if f.Workflow != r.def.Name {
		return nil, nil, fmt.Errorf("the fixture is a run of workflow %s, the bundle is workflow %s", f.Workflow, r.def.Name)
	}
	var missing []string
	for _, s := range f.Steps {
		if _, ok := r.steps[s.Key]; !ok {
			missing = append(missing, s.Key)
		}
	}
	if len(missing) > 0 {
		return nil, nil, fmt.Errorf("the fixture names steps that version %d of %s lacks: %s", r.version.Version, r.def.Name, strings.Join(missing, ", "))
	}
	digests, err := StepDigests(r.def)
	if err != nil {
		return nil, nil, err
	}
	recorded := map[string]*FixtureStep{}
	for i := range f.Steps {
		recorded[f.Steps[i].Key] = &f.Steps[i]
	}
	plan := &ReplayPlan{}
	dirty := map[string]bool{}
	for key, d := range digests {
		if s := recorded[key]; s == nil || s.Definition != d {
			dirty[key] = true
			plan.Changed = append(plan.Changed, key)
		} else if isBlob(s.Output) {
			dirty[key] = true
			plan.Blobs = append(plan.Blobs, key)
		} else if r.steps[key].Map != nil {
			dirty[key] = true
			plan.Maps = append(plan.Maps, key)
		}
	}
	// Dependents, in topological order (Definition.Steps is): a step runs again
	// when a step it needs does; a compensation when its step does; the
	// on_failure steps when any step does.
	anyDirty := len(dirty) > 0
	for _, s := range r.def.Steps {
		if !dirty[s.Key] {
			for _, n := range s.Needs {
				if dirty[n] {
					dirty[s.Key] = true
					plan.Dependents = append(plan.Dependents, s.Key)
					break
				}
			}
		}
		if s.Compensate != nil && dirty[s.Key] && !dirty[s.Compensate.Key] {
			dirty[s.Compensate.Key] = true
			plan.Dependents = append(plan.Dependents, s.Compensate.Key)
		}
	}
	for _, s := range r.def.OnFailure {
		if anyDirty && !dirty[s.Key] {
			dirty[s.Key] = true
			plan.Dependents = append(plan.Dependents, s.Key)
		}
	}
	main := map[string]bool{}
	for _, s := range r.def.Steps {
		main[s.Key] = true
	}
	c := &Case{Name: "replay of run " + f.RunID, Mocks: map[string]Mock{}, Labels: f.Labels,
		Expect: Expect{Steps: map[string]StepExpect{}}}
	if len(f.Input) > 0 {
		var in any
		if err := json.Unmarshal(f.Input, &in); err != nil {
			return nil, nil, fmt.Errorf("fixture input: %w", err)
		}
		c.Input = in
	}
	for _, s := range f.Steps {
		def := r.steps[s.Key]
		// External input comes back whatever changed: signals and decisions.
		if s.Status == "succeeded" && s.Signal != "" && s.At != nil {
			var data any
			_ = json.Unmarshal(s.Output, &data)
			c.Events = append(c.Events, Event{At: *s.At, Signal: s.Signal, Data: data})
		}
		if s.Approval && s.At != nil && def.Approval != nil && (s.Status == "succeeded" || s.Status == "failed") {
			for i := range max(def.Approval.Required, 1) {
				e := Event{At: *s.At, By: fmt.Sprintf("replay-%d", i+1)}
				if s.Status == "succeeded" {
					e.Approve = s.Key
				} else {
					e.Reject = s.Key
				}
				c.Events = append(c.Events, e)
				if e.Reject != "" {
					break
				}
			}
		}
		if dirty[s.Key] {
			continue
		}
		if m := mockOf(s); m != nil && invoked(def.Kind) {
			c.Mocks[s.Key] = m
			plan.Reused = append(plan.Reused, s.Key)
		}
		// A reused step of the DAG ends as it did; compensations and on_failure
		// steps run only when the run fails, which may have changed.
		if main[s.Key] && (s.Status == "succeeded" || s.Status == "failed" || s.Status == "skipped") {
			c.Expect.Steps[s.Key] = StepExpect{Status: s.Status}
		}
	}
	for _, l := range [][]string{plan.Reused, plan.Changed, plan.Dependents, plan.Blobs, plan.Maps} {
		sort.Strings(l)
	}
	return c, plan, nil
}

// invoked reports whether steps of kind run a handler (and so can be mocked).
func invoked(k bundle.Kind) bool {
	return k == bundle.KindExec || k == bundle.KindHTTP || k == bundle.KindLambda || k == bundle.KindBuiltin
}

// mockOf returns the recorded outcomes of a step as a mock; nil when it had
// no attempt that counts.
func mockOf(s FixtureStep) Mock {
	var m Mock
	for _, a := range s.Attempts {
		switch a.Status {
		case "succeeded":
			var out any
			if len(s.Output) > 0 {
				_ = json.Unmarshal(s.Output, &out)
			}
			m = append(m, Outcome{Output: out})
		case "failed", "timed_out":
			var e struct {
				Message   string `json:"message"`
				Code      string `json:"code"`
				Retryable *bool  `json:"retryable"`
			}
			_ = json.Unmarshal(a.Error, &e)
			if e.Message == "" {
				e.Message = "recorded failure"
			}
			m = append(m, Outcome{Error: &MockError{Message: e.Message, Code: e.Code, Retryable: e.Retryable}})
		}
	}
	return m
}

// isBlob reports whether an output is a {"$blob": …} reference.
func isBlob(out json.RawMessage) bool {
	var v map[string]json.RawMessage
	if json.Unmarshal(out, &v) != nil {
		return false
	}
	_, ok := v["$blob"]
	return ok && len(v) == 1
}
