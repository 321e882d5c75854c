package testrun

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/cairnrun/cairn/bundle"
)

// DefaultStart is where a case's virtual clock starts when it sets no start:
// a fixed instant, so that a case gives the same result whenever it runs.
var DefaultStart = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// DefaultMaxTime bounds how far a case's virtual clock may run (Case.MaxTime).
const DefaultMaxTime = 10 * 366 * 24 * time.Hour

// Case is one test case: a file tests/NAME.yaml beside cairn.yaml
// (docs/testing.md describes the format).
type Case struct {
	// Name is the case's name; default the file's name without .yaml.
	Name string `yaml:"name" json:"name"`
	// File is where the case was read from; empty for a replay.
	File string `yaml:"-" json:"-"`
	// Input is the run's input (any YAML value); default null.
	Input any `yaml:"input" json:"input"`
	// Schedule, when set, names a schedule of the workflow (schedules: in
	// cairn.yaml): the case's run is the one its first fire after Start
	// creates, with the schedule's input (the clock jumps to that fire).
	// Other schedules never fire in a case.
	Schedule string `yaml:"schedule" json:"schedule,omitempty"`
	// Labels of the run.
	Labels map[string]string `yaml:"labels" json:"labels,omitempty"`
	// Start is the virtual time at which the run starts; default DefaultStart.
	Start *time.Time `yaml:"start" json:"start,omitempty"`
	// MaxTime bounds the virtual time the case may take; default DefaultMaxTime.
	// A run still waiting then ends the case (its status is what it is).
	MaxTime Duration `yaml:"max_time" json:"max_time,omitempty"`
	// Mocks answer steps by key (a compensation's key is compensate-KEY, a map
	// instance's KEY[i], and KEY mocks every instance): one outcome for every
	// attempt, or a list of them, one per attempt (the last one repeats).
	Mocks map[string]Mock `yaml:"mocks" json:"mocks,omitempty"`
	// Events are delivered at virtual times after the run's start.
	Events []Event `yaml:"events" json:"events,omitempty"`
	// Expect is what the run must look like at the end.
	Expect Expect `yaml:"expect" json:"expect"`
}

// Mock is a step's outcomes, one per attempt; the last one repeats.
type Mock []Outcome

// UnmarshalYAML takes one outcome (a mapping) or a list of them.
func (m *Mock) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.SequenceNode {
		var list []Outcome
		if err := n.Decode(&list); err != nil {
			return err
		}
		if len(list) == 0 {
			return fmt.Errorf("line %d: a mock's list of outcomes is empty", n.Line)
		}
		*m = list
		return nil
	}
	var o Outcome
	if err := n.Decode(&o); err != nil {
		return err
	}
	*m = Mock{o}
	return nil
}

// Outcome is what one attempt of a mocked step does: succeed with Output, fail
// with Error, or suspend for a callback (Suspend, its timeout).
type Outcome struct {
	Output  any        `yaml:"output" json:"output,omitempty"`
	Error   *MockError `yaml:"error" json:"error,omitempty"`
	Suspend *Duration  `yaml:"suspend" json:"suspend,omitempty"`
}

// MockError is a mocked failure: the function's error as a handler reports
// it (docs/functions.md). Retryable defaults to true, as for a handler that
// fails without saying.
type MockError struct {
	Message   string `yaml:"message" json:"message"`
	Code      string `yaml:"code" json:"code,omitempty"`
	Retryable *bool  `yaml:"retryable" json:"retryable,omitempty"`
}

// Event is something that happens to the run at a virtual time: a signal, an
// approval or a rejection of an approval step, or a callback completing a
// step that suspended for one.
type Event struct {
	// At is how long after the run's start; default 0.
	At Duration `yaml:"at" json:"at"`
	// Signal names a signal to send, with Data as its payload.
	Signal string `yaml:"signal" json:"signal,omitempty"`
	Data   any    `yaml:"data" json:"data,omitempty"`
	// Approve or Reject names an approval step; By is the approver (default
	// "tester"), with Comment and Input.
	Approve string `yaml:"approve" json:"approve,omitempty"`
	Reject  string `yaml:"reject" json:"reject,omitempty"`
	By      string `yaml:"by" json:"by,omitempty"`
	Comment string `yaml:"comment" json:"comment,omitempty"`
	Input   any    `yaml:"input" json:"input,omitempty"`
	// Callback names a step suspended for a callback, completed with Output,
	// or failed with Error.
	Callback string     `yaml:"callback" json:"callback,omitempty"`
	Output   any        `yaml:"output" json:"output,omitempty"`
	Error    *MockError `yaml:"error" json:"error,omitempty"`
}

func (e Event) what() string {
	switch {
	case e.Signal != "":
		return "signal " + e.Signal
	case e.Approve != "":
		return "approve " + e.Approve
	case e.Reject != "":
		return "reject " + e.Reject
	default:
		return "callback " + e.Callback
	}
}

// Expect is what a case checks once its run has ended (or its virtual time
// ran out). Every field is optional.
type Expect struct {
	// Status is the run's status: succeeded, failed, canceled, running, …
	Status string `yaml:"status" json:"status,omitempty"`
	// ErrorCode is the code of the run's error.
	ErrorCode string `yaml:"error_code" json:"error_code,omitempty"`
	// Steps by key: a status, or a mapping of what to check.
	Steps map[string]StepExpect `yaml:"steps" json:"steps,omitempty"`
	// Outputs maps a path, a step key then JSONPath-like fields and indexes
	// (charge.id, split.items[0].name), to the value found there.
	Outputs map[string]any `yaml:"outputs" json:"outputs,omitempty"`
	// Ran lists steps that must have run (at least one attempt); NotRan steps
	// that must not have.
	Ran    []string `yaml:"ran" json:"ran,omitempty"`
	NotRan []string `yaml:"not_ran" json:"not_ran,omitempty"`
	// Elapsed is the virtual time from the run's start to its end.
	Elapsed *Duration `yaml:"elapsed" json:"elapsed,omitempty"`
}

// StepExpect is what a case checks of one step.
type StepExpect struct {
	Status string `yaml:"status" json:"status,omitempty"`
	// Reason is a skipped step's skip reason (condition_false, upstream_failed, …).
	Reason    string `yaml:"reason" json:"reason,omitempty"`
	ErrorCode string `yaml:"error_code" json:"error_code,omitempty"`
	Attempts  *int   `yaml:"attempts" json:"attempts,omitempty"`
	// Output, when present, must equal the step's output.
	Output    any  `yaml:"output" json:"output,omitempty"`
	HasOutput bool `yaml:"-" json:"-"`
}

// UnmarshalYAML takes a status alone or a mapping.
func (s *StepExpect) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		s.Status = n.Value
		return nil
	}
	type plain StepExpect
	var p plain
	if err := n.Decode(&p); err != nil {
		return err
	}
	*s = StepExpect(p)
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "output" {
			s.HasOutput = true
		}
	}
	return nil
}

// Duration is a time.Duration written as Go writes one ("90s", "1h30m") or
// with days ("365d", "30d12h").
type Duration time.Duration

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// ParseDuration reads a Duration.
func ParseDuration(s string) (Duration, error) {
	s = strings.TrimSpace(s)
	var days int64
	if i := strings.IndexByte(s, 'd'); i > 0 {
		n, err := strconv.ParseInt(s[:i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("invalid duration %q", s)
		}
		days, s = n, s[i+1:]
	}
	var rest time.Duration
	if s != "" {
		var err error
		if rest, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("invalid duration %q: use a number with a unit, like 30s, 5m, 2h or 365d", s)
		}
	}
	return Duration(time.Duration(days)*24*time.Hour + rest), nil
}

// UnmarshalYAML parses a duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*d = v
	return nil
}

// String writes d with days when it has whole days ("30d", "1d2h0m0s").
func (d Duration) String() string {
	std := d.Std()
	days := std / (24 * time.Hour)
	if days == 0 {
		return std.String()
	}
	if rest := std - days*24*time.Hour; rest != 0 {
		return fmt.Sprintf("%dd%s", days, rest)
	}
	return fmt.Sprintf("%dd", days)
}

// MarshalJSON writes d as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := ParseDuration(s)
	*d = v
	return err
}

// ParseCase reads a case from YAML; name is its default name.
func ParseCase(data []byte, name string) (*Case, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var c Case
	if err := dec.Decode(&c); err != nil {
		return nil, err
	}
	if c.Name == "" {
		c.Name = name
	}
	for i, e := range c.Events {
		n := 0
		for _, set := range []bool{e.Signal != "", e.Approve != "", e.Reject != "", e.Callback != ""} {
			if set {
				n++
			}
		}
		if n != 1 {
			return nil, fmt.Errorf("events[%d]: name exactly one of signal, approve, reject and callback", i)
		}
	}
	if c.Schedule != "" && c.Input != nil {
		return nil, fmt.Errorf("schedule %s: the schedule gives the run its input; leave input out", c.Schedule)
	}
	for key, m := range c.Mocks {
		for i, o := range m {
			n := 0
			for _, set := range []bool{o.Output != nil, o.Error != nil, o.Suspend != nil} {
				if set {
					n++
				}
			}
			if n > 1 {
				return nil, fmt.Errorf("mocks.%s[%d]: give one of output, error and suspend", key, i)
			}
		}
	}
	return &c, nil
}

// LoadCases reads the cases of a bundle folder: tests/*.yaml and tests/*.yml,
// in the order of their names. No tests folder, or none in it, is an error.
// The folder is not part of the bundle (bundle.TestsDir).
func LoadCases(bundleDir string) ([]*Case, error) {
	dir := filepath.Join(bundleDir, bundle.TestsDir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no test cases: %s does not exist (docs/testing.md shows how to write one)", dir)
	}
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		if ext := filepath.Ext(e.Name()); !e.IsDir() && (ext == ".yaml" || ext == ".yml") {
			files = append(files, e.Name())
		}
	}
	sort.Strings(files)
	if len(files) == 0 {
		return nil, fmt.Errorf("no test cases: %s has no .yaml file (docs/testing.md shows how to write one)", dir)
	}
	cases := make([]*Case, 0, len(files))
	for _, f := range files {
		p := filepath.Join(dir, f)
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		c, err := ParseCase(data, strings.TrimSuffix(f, filepath.Ext(f)))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		c.File = p
		cases = append(cases, c)
	}
	return cases, nil
}
