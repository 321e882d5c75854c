package bundle

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"
)

// Value is a plain string or a reference to a secret (PUT /v1/secrets/{name}):
// an environment variable of an exec step (env) or a header of an http step
// (http.headers). In YAML and JSON a plain value is a string ("value"; a YAML
// number or bool is taken as its text) and a secret reference is {secret: name}.
// A reference keeps only the secret's name: its value is read from the secret
// store when an attempt starts and is never written to the bundle or the
// definition.
type Value struct {
	// Plain is the value when Secret is empty.
	Plain string
	// Secret names the secret whose newest version is the value.
	Secret string
}

// IsSecret reports whether v is a secret reference.
func (v Value) IsSecret() bool { return v.Secret != "" }

// UnmarshalYAML reads a scalar or {secret: name}.
func (v *Value) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*v = Value{Plain: n.Value}
		return nil
	case yaml.MappingNode:
		if len(n.Content) != 2 || n.Content[0].Value != "secret" || n.Content[1].Kind != yaml.ScalarNode || n.Content[1].Value == "" {
			return fmt.Errorf("line %d: a secret reference is {secret: name}, nothing else", n.Line)
		}
		*v = Value{Secret: n.Content[1].Value}
		return nil
	}
	return fmt.Errorf("line %d: want a string or {secret: name}", n.Line)
}

// MarshalYAML writes a string or {secret: name}.
func (v Value) MarshalYAML() (any, error) {
	if v.IsSecret() {
		return map[string]string{"secret": v.Secret}, nil
	}
	return v.Plain, nil
}

// MarshalJSON writes a string or {"secret": name}.
func (v Value) MarshalJSON() ([]byte, error) {
	if v.IsSecret() {
		return json.Marshal(map[string]string{"secret": v.Secret})
	}
	return json.Marshal(v.Plain)
}

// UnmarshalJSON reads a string or {"secret": name}.
func (v *Value) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '{' {
		var ref struct {
			Secret string `json:"secret"`
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&ref); err != nil {
			return err
		}
		if ref.Secret == "" {
			return fmt.Errorf("a secret reference is {\"secret\": name}")
		}
		*v = Value{Secret: ref.Secret}
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a string or {\"secret\": name}")
	}
	*v = Value{Plain: s}
	return nil
}

// reEnvName is an environment variable's name.
var reEnvName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// maxEnvValue bounds a plain env value, in bytes.
const maxEnvValue = 32 << 10

// env checks an env map (a step's or the defaults').
func (v *validator) env(key, f string, env map[string]Value) {
	for _, name := range sortedKeys(env) {
		val := env[name]
		ef := fmt.Sprintf("%s.%s", f, name)
		switch {
		case !reEnvName.MatchString(name):
			v.add(key, ef, "environment variable name %q must be letters, digits and '_', not starting with a digit (at most 128)", name)
		case strings.HasPrefix(strings.ToUpper(name), "CAIRN_"):
			v.add(key, ef, "environment variable %q: the CAIRN_ prefix is Cairn's own", name)
		}
		v.valueRef(key, ef, val)
		if !val.IsSecret() {
			switch {
			case strings.IndexByte(val.Plain, 0) >= 0:
				v.add(key, ef, "value contains a NUL byte")
			case len(val.Plain) > maxEnvValue:
				v.add(key, ef, "value is %d bytes long, over the %d-byte limit", len(val.Plain), maxEnvValue)
			}
		}
	}
}

// valueRef checks the secret name of a Value.
func (v *validator) valueRef(key, f string, val Value) {
	if val.IsSecret() && !reKey.MatchString(val.Secret) {
		v.add(key, f+".secret", "secret name %q must be 1 to 63 lower-case letters, digits, '_' and '-', starting with a letter or digit", val.Secret)
	}
}

// stepEnv checks a step's env: exec steps only.
func (v *validator) stepEnv(key, f string, s Step) {
	if s.Env == nil {
		return
	}
	if s.Exec == nil {
		v.add(key, f+".env", "env applies to exec steps only (an http step takes secrets in http.headers)")
		return
	}
	v.env(key, f+".env", s.Env)
}

// effectiveEnv merges the defaults' env and an exec step's own (the step's wins,
// name by name); nil when both are empty or the step is not exec.
func effectiveEnv(d *StepDefinition, own, defaults map[string]Value) map[string]Value {
	if d.Kind != KindExec || len(own)+len(defaults) == 0 {
		return nil
	}
	out := make(map[string]Value, len(own)+len(defaults))
	maps.Copy(out, defaults)
	maps.Copy(out, own)
	return out
}

// SecretRefs returns the names of the secrets a step definition references (env
// and http headers), sorted, without duplicates.
func (d *StepDefinition) SecretRefs() []string {
	var out []string
	for _, v := range d.Env {
		if v.IsSecret() {
			out = append(out, v.Secret)
		}
	}
	if d.HTTP != nil {
		for _, v := range d.HTTP.Headers {
			if v.IsSecret() {
				out = append(out, v.Secret)
			}
		}
	}
	return dedupe(out)
}

// applyEnv sets the effective env of d (normalized from s) and of its
// compensation.
func applyEnv(d *StepDefinition, s *Step, defaults map[string]Value) {
	d.Env = effectiveEnv(d, s.Env, defaults)
	if d.Compensate != nil && s.Compensate != nil {
		applyEnv(d.Compensate, s.Compensate, defaults)
	}
}
