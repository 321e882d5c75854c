package bundle

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"

	"gopkg.in/yaml.v3"

	"github.com/cairnrun/cairn/expr"
)

// KindWorkflow is a step that starts a child run (docs/functions.md, "Child
// runs"): a run of another (or the same) workflow, pinned to a version or an
// alias, whose end ends the step. It runs no function: the dispatcher that claims
// it creates the child and suspends it (catalog.ChildStart).
const KindWorkflow Kind = "workflow"

// reWorkflowName is the syntax of a workflow's name (Manifest.Name).
var reWorkflowName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// reAliasName is the syntax of an alias (catalog.AliasPattern).
var reAliasName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)

// WorkflowSpec is a workflow step: `workflow: {name, version, input}`.
type WorkflowSpec struct {
	// Name of the child's workflow.
	Name string `yaml:"name" json:"name"`
	// Version is a version number or an alias; unset: latest (resolved when the
	// child starts).
	Version ChildVersion `yaml:"version,omitempty" json:"version,omitzero"`
	// Input is a CEL expression giving the child's input (package expr); unset:
	// the child's input is null.
	Input string `yaml:"input,omitempty" json:"input,omitempty"`
}

// ChildVersion is a version number (Number > 0) or an alias name (Alias); the zero
// value means latest.
type ChildVersion struct {
	Number int
	Alias  string
}

// IsZero reports an unset version.
func (v ChildVersion) IsZero() bool { return v.Number == 0 && v.Alias == "" }

// String is the number or the alias.
func (v ChildVersion) String() string {
	if v.Number > 0 {
		return strconv.Itoa(v.Number)
	}
	return v.Alias
}

// UnmarshalYAML takes an integer or a string (an alias, or digits: a number).
func (v *ChildVersion) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: workflow.version must be a version number or an alias", n.Line)}}
	}
	v.set(n.Value)
	return nil
}

// set reads s: digits are a number (a negative or zero one is kept as an alias,
// which validation refuses), anything else an alias.
func (v *ChildVersion) set(s string) {
	if i, err := strconv.Atoi(s); err == nil && i > 0 {
		*v = ChildVersion{Number: i}
		return
	}
	*v = ChildVersion{Alias: s}
}

// MarshalYAML writes a number or an alias.
func (v ChildVersion) MarshalYAML() (any, error) {
	if v.Number > 0 {
		return v.Number, nil
	}
	return v.Alias, nil
}

// MarshalJSON writes a number or an alias string.
func (v ChildVersion) MarshalJSON() ([]byte, error) {
	if v.Number > 0 {
		return json.Marshal(v.Number)
	}
	return json.Marshal(v.Alias)
}

// UnmarshalJSON takes a number or a string.
func (v *ChildVersion) UnmarshalJSON(b []byte) error {
	var n json.Number
	if err := json.Unmarshal(b, &n); err == nil {
		v.set(n.String())
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("workflow.version must be a number or an alias: %w", err)
	}
	v.set(s)
	return nil
}

// WorkflowDefinition is a normalized workflow step: Version (> 0) or Alias (latest
// when neither was given).
type WorkflowDefinition struct {
	Name    string `json:"name"`
	Version int    `json:"version,omitempty"`
	Alias   string `json:"alias,omitempty"`
	// Input is the CEL expression of the child's input; "" for null.
	Input string `json:"input,omitempty"`
}

// ChildWorkflow is a child workflow pinned by number (ChildWorkflows).
type ChildWorkflow struct {
	// Step is the key of the step, Field the manifest field naming the version.
	Step, Field string
	Name        string
	Version     int
}

// ChildWorkflows lists the workflow steps of m pinned to a version number, which
// the server checks at deploy (the workflow and version must exist).
func (m *Manifest) ChildWorkflows() []ChildWorkflow {
	var out []ChildWorkflow
	for i, s := range m.Steps {
		if s.Workflow != nil && s.Workflow.Version.Number > 0 {
			out = append(out, ChildWorkflow{Step: s.Key, Field: fmt.Sprintf("steps[%d].workflow.version", i),
				Name: s.Workflow.Name, Version: s.Workflow.Version.Number})
		}
	}
	return out
}

// workflowKind validates the workflow step s (field f) if it is one, and returns its
// kind's name.
func (v *validator) workflowKind(f string, s Step) []string {
	w := s.Workflow
	if w == nil {
		return nil
	}
	if !reWorkflowName.MatchString(w.Name) {
		v.add(s.Key, f+".workflow.name", "workflow name %q must match %s", w.Name, reWorkflowName)
	}
	if w.Version.Number == 0 && w.Version.Alias != "" && !reAliasName.MatchString(w.Version.Alias) {
		v.add(s.Key, f+".workflow.version", "version %q must be a version number (1 or more) or an alias matching %s",
			w.Version.Alias, reAliasName)
	}
	if w.Input != "" {
		if err := expr.StepEnv.Check(w.Input); err != nil {
			v.add(s.Key, f+".workflow.input", "bad expression: %v", err)
		}
	}
	return []string{"workflow"}
}

// normalizeWorkflow fills d for a workflow step; false for other steps.
func normalizeWorkflow(s *Step, d *StepDefinition) bool {
	if s.Workflow == nil {
		return false
	}
	d.Kind = KindWorkflow
	d.Workflow = &WorkflowDefinition{Name: s.Workflow.Name, Version: s.Workflow.Version.Number,
		Alias: s.Workflow.Version.Alias, Input: s.Workflow.Input}
	return true
}
