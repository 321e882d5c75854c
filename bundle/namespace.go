package bundle

import "github.com/cairnrun/cairn/namespace"

// Qualify keys every name d uses to reach another object of the catalog in
// namespace ns (package namespace): the workflow's own name (and so the default
// name of its limits), the limits, secrets, events and child workflows its steps,
// hooks and triggers name. Deploying in ns stores the qualified definition, so a run
// of it reaches its namespace's objects only; in namespace.Default nothing changes.
// d is changed in place.
func (d *Definition) Qualify(ns string) {
	d.mapNames(func(name string) string { return namespace.Qualify(ns, name) })
}

// Strip undoes Qualify: the names as the user wrote them, for display.
func (d *Definition) Strip() {
	d.mapNames(namespace.Strip)
}

// mapNames replaces every name of another object of the catalog in d with f(name).
// It is the one list of those names: a new field that names one is added here.
func (d *Definition) mapNames(f func(string) string) {
	d.Name = f(d.Name)
	for i := range d.Steps {
		d.Steps[i].mapNames(f)
	}
	for i := range d.OnFailure {
		d.OnFailure[i].mapNames(f)
	}
	for i := range d.Hooks {
		h := &d.Hooks[i]
		h.Secret = f(h.Secret)
		if h.Emit != nil {
			h.Emit.Event = f(h.Emit.Event)
		}
	}
	for i := range d.Triggers {
		d.Triggers[i].Event = f(d.Triggers[i].Event)
	}
	for i := range d.CancelOn {
		d.CancelOn[i].Event = f(d.CancelOn[i].Event)
	}
}

func (s *StepDefinition) mapNames(f func(string) string) {
	if s.Concurrency != nil {
		s.Concurrency.Name = f(s.Concurrency.Name)
	}
	if s.RateLimit != nil {
		s.RateLimit.Name = f(s.RateLimit.Name)
	}
	for k, v := range s.Env {
		if v.IsSecret() {
			v.Secret = f(v.Secret)
			s.Env[k] = v
		}
	}
	if s.HTTP != nil {
		for k, v := range s.HTTP.Headers {
			if v.IsSecret() {
				v.Secret = f(v.Secret)
				s.HTTP.Headers[k] = v
			}
		}
	}
	if s.WaitForEvent != nil {
		s.WaitForEvent.Event = f(s.WaitForEvent.Event)
	}
	if s.Workflow != nil {
		s.Workflow.Name = f(s.Workflow.Name)
	}
	if s.Compensate != nil {
		s.Compensate.mapNames(f)
	}
}
