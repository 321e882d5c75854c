package bundle

import (
	"slices"
)

// KindApproval is an approval step (docs/api-endpoints.md, "Approvals"): it runs no
// function; it waits for POST /v1/runs/{id}/steps/{key}/approve (or reject) from
// tokens of its roles.
const KindApproval Kind = "approval"

// MaxApprovalsRequired bounds an approval's required approvals.
const MaxApprovalsRequired = 100

// ApprovalSpec is an approval step: `approval: {required, roles, timeout,
// on_timeout}`. Its output is {"approved_by": [{name, comment, input, at}…]}.
type ApprovalSpec struct {
	// Required distinct approvers must approve: 1 (default) to 100.
	Required *int `yaml:"required,omitempty" json:"required,omitempty"`
	// Roles of the tokens that may approve or reject: operator, admin (default:
	// [operator]; admin always may).
	Roles []string `yaml:"roles,omitempty" json:"roles,omitempty"`
	// Timeout: how long the step waits at most, up to a year; unset: forever.
	Timeout *Duration `yaml:"timeout,omitempty" json:"timeout,omitempty"`
	// OnTimeout is fail (default: the step fails with code timeout) or continue
	// (it succeeds with a null output).
	OnTimeout string `yaml:"on_timeout,omitempty" json:"on_timeout,omitempty"`
}

// ApprovalDefinition is a normalized approval step.
type ApprovalDefinition struct {
	Required int      `json:"required"`
	Roles    []string `json:"roles"`
	// Timeout and TimeoutMS are unset (0) for no timeout.
	Timeout   *Duration `json:"timeout,omitempty"`
	TimeoutMS int64     `json:"timeout_ms,omitempty"`
	// OnTimeout is fail or continue.
	OnTimeout string `json:"on_timeout"`
}

// approvalKind validates s's approval, if it has one, and returns its kind's name.
func (v *validator) approvalKind(f string, s Step) []string {
	a := s.Approval
	if a == nil {
		return nil
	}
	if a.Required != nil && (*a.Required < 1 || *a.Required > MaxApprovalsRequired) {
		v.add(s.Key, f+".approval.required", "required must be 1 to %d, not %d", MaxApprovalsRequired, *a.Required)
	}
	if a.Roles != nil && len(a.Roles) == 0 {
		v.add(s.Key, f+".approval.roles", "roles is empty: name operator, admin or both (or leave it out: operator)")
	}
	for _, r := range a.Roles {
		if r != "operator" && r != "admin" {
			v.add(s.Key, f+".approval.roles", "role %q may not approve: operator or admin", r)
		}
	}
	if a.Timeout != nil {
		if d := a.Timeout.Std(); d <= 0 || d > MaxSleep {
			v.add(s.Key, f+".approval.timeout", "timeout %s: must be > 0 and at most %s (a year)", a.Timeout, Duration(MaxSleep))
		}
	}
	switch a.OnTimeout {
	case "", "fail", "continue":
	default:
		v.add(s.Key, f+".approval.on_timeout", "on_timeout must be fail or continue, not %q", a.OnTimeout)
	}
	return []string{"approval"}
}

// normalizeApproval fills d's kind and approval for an approval step; false for
// other steps.
func normalizeApproval(s *Step, d *StepDefinition) bool {
	a := s.Approval
	if a == nil {
		return false
	}
	out := &ApprovalDefinition{Required: 1, Roles: []string{"operator"}, OnTimeout: a.OnTimeout}
	if a.Required != nil {
		out.Required = *a.Required
	}
	if len(a.Roles) > 0 {
		out.Roles = slices.Compact(slices.Sorted(slices.Values(a.Roles)))
	}
	if out.OnTimeout == "" {
		out.OnTimeout = "fail"
	}
	if a.Timeout != nil {
		t := *a.Timeout
		out.Timeout, out.TimeoutMS = &t, t.Std().Milliseconds()
	}
	d.Kind = KindApproval
	d.Approval = out
	return true
}
