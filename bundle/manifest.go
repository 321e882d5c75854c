package bundle

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// ManifestPath is the path of the manifest in a bundle: cairn.yaml at its root.
const ManifestPath = "cairn.yaml"

// Manifest is the content of cairn.yaml, as written by the user.
// ParseManifest decodes it, Validate checks it, Normalize turns it into the Definition
// that the catalog stores and the engine runs.
type Manifest struct {
	// Name is the workflow's name: ^[a-z0-9][a-z0-9-]{0,62}$.
	Name string `yaml:"name" json:"name"`
	// Description is free text, at most 4096 bytes.
	Description string `yaml:"description,omitempty" json:"description,omitempty"`
	// Defaults apply to every step that does not set the field itself.
	Defaults *Defaults `yaml:"defaults,omitempty" json:"defaults,omitempty"`
	// Timeout bounds a whole run: a run not ended that long after it was created
	// fails, code deadline_exceeded (flow.go). Unset: no bound. A run's start may
	// give its own deadline.
	Timeout *Duration `yaml:"timeout,omitempty" json:"timeout,omitempty"`
	// Retention is how long finished runs are kept (retention.go); unset: the
	// server's default.
	Retention *Retention `yaml:"retention,omitempty" json:"retention,omitempty"`
	// Steps are the nodes of the DAG; at least one.
	Steps []Step `yaml:"steps" json:"steps"`
	// Hooks are the webhooks that start runs of the workflow (hook.go).
	Hooks []Hook `yaml:"hooks,omitempty" json:"hooks,omitempty"`
	// Schedules start runs of the workflow's latest version on a clock (schedule.go).
	Schedules []Schedule `yaml:"schedules,omitempty" json:"schedules,omitempty"`
	// Triggers start runs of the workflow's latest version by received events
	// (event.go).
	Triggers []Trigger `yaml:"triggers,omitempty" json:"triggers,omitempty"`
	// CancelOn cancels the workflow's unfinished runs by received events (event.go).
	CancelOn []CancelOn `yaml:"cancel_on,omitempty" json:"cancel_on,omitempty"`
	// OnFailure are steps run once when a run fails, after its compensations, with
	// "failure" in their envelope (condition.go).
	OnFailure []Step `yaml:"on_failure,omitempty" json:"on_failure,omitempty"`
}

// Defaults are the timeout and retry policy of the steps that do not set their own.
type Defaults struct {
	// Timeout of one attempt; default 5m.
	Timeout *Duration `yaml:"timeout,omitempty" json:"timeout,omitempty"`
	// Retry policy; each unset field falls back to the built-in default (see
	// RetryPolicy).
	Retry *RetryPolicy `yaml:"retry,omitempty" json:"retry,omitempty"`
	// Concurrency applies to every step that sets none itself (flow.go).
	Concurrency *ConcurrencySpec `yaml:"concurrency,omitempty" json:"concurrency,omitempty"`
	// RateLimit applies to every step that sets none itself (flow.go).
	RateLimit *RateLimitSpec `yaml:"rate_limit,omitempty" json:"rate_limit,omitempty"`
	// Priority applies to every step that sets none itself: 0..9, higher first;
	// unset, DefaultPriority.
	Priority *int `yaml:"priority,omitempty" json:"priority,omitempty"`
	// QueueTimeout applies to every step that sets none itself (flow.go).
	QueueTimeout *Duration `yaml:"queue_timeout,omitempty" json:"queue_timeout,omitempty"`
	// Env applies to every exec step, name by name under the step's own env
	// (env.go); the other kinds ignore it.
	Env map[string]Value `yaml:"env,omitempty" json:"env,omitempty"`
	// Network applies to every exec step that sets none itself (network.go).
	Network *Network `yaml:"network,omitempty" json:"network,omitempty"`
}

// Step is one step of a manifest. Exactly one of Exec, HTTP, Lambda, Builtin, Sleep,
// Signal and Workflow is set.
type Step struct {
	// Key names the step: ^[a-z0-9][a-z0-9_-]{0,62}$, unique in the manifest.
	Key string `yaml:"key" json:"key"`
	// Needs lists the keys of the steps that must succeed before this one runs.
	Needs []string `yaml:"needs,omitempty" json:"needs,omitempty"`
	// Exec is the argv of a program of the bundle: Exec[0] is a path relative to the
	// bundle root ("./bin/fetch" or "bin/fetch") naming an executable file.
	Exec []string `yaml:"exec,omitempty" json:"exec,omitempty"`
	// HTTP calls an HTTP endpoint.
	HTTP *HTTPSpec `yaml:"http,omitempty" json:"http,omitempty"`
	// Lambda invokes an AWS Lambda function.
	Lambda *LambdaSpec `yaml:"lambda,omitempty" json:"lambda,omitempty"`
	// Builtin names a built-in function: noop, echo, sleep or fail.
	Builtin string `yaml:"builtin,omitempty" json:"builtin,omitempty"`
	// Sleep waits for a duration or until a time, durably (wait.go).
	Sleep *SleepSpec `yaml:"sleep,omitempty" json:"sleep,omitempty"`
	// Signal waits for a signal (wait.go).
	Signal *SignalSpec `yaml:"signal,omitempty" json:"signal,omitempty"`
	// WaitForEvent waits for a received event (event.go).
	WaitForEvent *WaitForEventSpec `yaml:"wait_for_event,omitempty" json:"wait_for_event,omitempty"`
	// Approval waits for approvals (approval.go).
	Approval *ApprovalSpec `yaml:"approval,omitempty" json:"approval,omitempty"`
	// Workflow starts a child run and waits for its end (workflow_step.go).
	Workflow *WorkflowSpec `yaml:"workflow,omitempty" json:"workflow,omitempty"`
	// Map runs the step once per item of a list (map.go).
	Map *MapSpec `yaml:"map,omitempty" json:"map,omitempty"`
	// With holds static parameters, passed to the function as "params".
	With map[string]any `yaml:"with,omitempty" json:"with,omitempty"`
	// Timeout of one attempt: > 0 and <= 24h. Default: Defaults.Timeout, then 5m.
	Timeout *Duration `yaml:"timeout,omitempty" json:"timeout,omitempty"`
	// Retry policy; each unset field falls back to Defaults.Retry, then to the
	// built-in default.
	Retry *RetryPolicy `yaml:"retry,omitempty" json:"retry,omitempty"`
	// Network is an exec step's network: none, or {allow: [host:port, …]} of the
	// server's host; unset, outbound only (network.go). Default:
	// Defaults.Network. Only servers that isolate handlers can honour none: the
	// others refuse the step.
	Network *Network `yaml:"network,omitempty" json:"network,omitempty"`
	// Env is an exec step's environment variables: plain values or secret
	// references ({secret: name}), resolved when each attempt starts (env.go).
	Env map[string]Value `yaml:"env,omitempty" json:"env,omitempty"`
	// Resources bounds an exec step's memory, CPU and processes (resources.go).
	Resources *ResourcesSpec `yaml:"resources,omitempty" json:"resources,omitempty"`
	// Concurrency bounds the attempts of this step running at once, per key
	// (flow.go); default Defaults.Concurrency.
	Concurrency *ConcurrencySpec `yaml:"concurrency,omitempty" json:"concurrency,omitempty"`
	// RateLimit bounds the starts of this step's attempts per window, per key
	// (flow.go); default Defaults.RateLimit.
	RateLimit *RateLimitSpec `yaml:"rate_limit,omitempty" json:"rate_limit,omitempty"`
	// Priority orders the claims of ready steps: 0..9, higher first; default
	// Defaults.Priority, then DefaultPriority. A run may override it at start.
	Priority *int `yaml:"priority,omitempty" json:"priority,omitempty"`
	// RunsOn lists the tags a dispatcher must have (cairn serve --tags) to claim
	// the step: all of them. Unset: any dispatcher.
	RunsOn []string `yaml:"runs_on,omitempty" json:"runs_on,omitempty"`
	// QueueTimeout is the longest a ready step may wait to start (for a slot, a
	// token or a dispatcher); past it the step fails, code queue_timeout. Default
	// Defaults.QueueTimeout; unset: no bound.
	QueueTimeout *Duration `yaml:"queue_timeout,omitempty" json:"queue_timeout,omitempty"`
	// When is a CEL condition over the step's scope, evaluated when the step is
	// ready: false skips the step (reason condition_false), without an attempt
	// (condition.go).
	When string `yaml:"when,omitempty" json:"when,omitempty"`
	// After is the step's trigger rule: when it runs, given how its upstream
	// steps ended; default all_succeeded (condition.go).
	After TriggerRule `yaml:"after,omitempty" json:"after,omitempty"`
	// Compensate is a step-like body (exec, http, lambda or builtin, with its
	// with, timeout and retry) run when the run fails after this step succeeded,
	// in reverse completion order (condition.go).
	Compensate *Step `yaml:"compensate,omitempty" json:"compensate,omitempty"`
}

// HTTPSpec is the function of an http step: a POST of the envelope to URL.
type HTTPSpec struct {
	// URL is absolute, http or https.
	URL string `yaml:"url" json:"url"`
	// Headers are added to the request: plain values or secret references
	// ({secret: name}, resolved when each attempt starts; env.go). Names are
	// canonicalized in the Definition; the headers Cairn sets itself (Cairn-*,
	// Idempotency-Key, Content-Type, Content-Length, Host, Transfer-Encoding) are
	// refused.
	Headers map[string]Value `yaml:"headers,omitempty" json:"headers,omitempty"`
}

// LambdaSpec is the function of a lambda step.
type LambdaSpec struct {
	// Function is the function's name or ARN; required.
	Function string `yaml:"function" json:"function"`
	// Qualifier is an optional version or alias.
	Qualifier string `yaml:"qualifier,omitempty" json:"qualifier,omitempty"`
}

// Backoff is how the delay between attempts grows.
type Backoff string

// The backoff kinds, for attempt n >= 1 (the delay before attempt n+1):
// fixed waits Delay, linear n×Delay, exponential 2^(n-1)×Delay; each capped by
// MaxDelay.
const (
	BackoffFixed       Backoff = "fixed"
	BackoffLinear      Backoff = "linear"
	BackoffExponential Backoff = "exponential"
)

// RetryPolicy is a retry policy as written; nil fields are unset and fall back, field
// by field, to the defaults' policy and then to the built-in default: max_attempts 1,
// backoff fixed, delay 1s, max_delay max(delay, 1h), jitter 0, on_exhausted fail.
type RetryPolicy struct {
	// MaxAttempts counts the first try: 1..100.
	MaxAttempts *int `yaml:"max_attempts,omitempty" json:"max_attempts,omitempty"`
	// Backoff is fixed, linear or exponential; "" is unset.
	Backoff Backoff `yaml:"backoff,omitempty" json:"backoff,omitempty"`
	// Delay is the base delay: 0..24h.
	Delay *Duration `yaml:"delay,omitempty" json:"delay,omitempty"`
	// MaxDelay caps the delay: 0..24h and >= Delay.
	MaxDelay *Duration `yaml:"max_delay,omitempty" json:"max_delay,omitempty"`
	// Jitter randomizes each delay by up to ±Jitter×delay: 0..1.
	Jitter *float64 `yaml:"jitter,omitempty" json:"jitter,omitempty"`
	// OnExhausted is what happens when the step would fail (its attempts used up,
	// or a failure that is not retryable): fail (the step fails, the run fails) or
	// pause (the step is parked with a fresh attempt budget and the run paused
	// until an operator resumes or cancels it); "" is unset.
	OnExhausted OnExhausted `yaml:"on_exhausted,omitempty" json:"on_exhausted,omitempty"`
	// MaxInterruptions bounds the attempts in a row that end because the
	// dispatcher running them died (lease expired): 1..100, default
	// DefaultMaxInterruptions (5). Such attempts never use up MaxAttempts; the
	// one that reaches the bound fails the step with code interrupted_too_often.
	MaxInterruptions *int `yaml:"max_interruptions,omitempty" json:"max_interruptions,omitempty"`
}

// OnExhausted is a retry policy's on_exhausted.
type OnExhausted string

// What a step does when it would fail.
const (
	OnExhaustedFail  OnExhausted = "fail"
	OnExhaustedPause OnExhausted = "pause"
)

// Duration is a time.Duration written as a string: "2s", "5m", "1h30m" in YAML and
// JSON (time.ParseDuration syntax; a bare 0 is accepted too). It marshals to JSON as
// its canonical string, "2m0s" for 2m.
type Duration time.Duration

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// String returns the canonical form: time.Duration's String, "1m30s".
func (d Duration) String() string { return time.Duration(d).String() }

// UnmarshalYAML parses a duration string. Errors name the line.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!str" && n.Value != "0") {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf(
			"line %d: invalid duration %q: must be a string with a unit, like \"30s\" or \"5m\"", n.Line, n.Value)}}
	}
	v, err := ParseDuration(n.Value)
	if err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf(
			"line %d: invalid duration %q: use a number with a unit, like \"30s\" or \"5m\"", n.Line, n.Value)}}
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML returns the canonical string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// MarshalJSON returns the canonical string, quoted.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON parses a quoted duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string: %w", err)
	}
	v, err := ParseDuration(s)
	if err != nil {
		return fmt.Errorf("invalid duration %q: %w", s, err)
	}
	*d = Duration(v)
	return nil
}

// reDays is a leading whole number of days in a duration ("365d", "1d12h").
var reDays = regexp.MustCompile(`^([0-9]{1,6})d`)

// ParseDuration reads a duration as time.ParseDuration does, with a leading whole
// number of days allowed ("365d", "1d12h": a day is 24 hours). A duration is
// written back in hours (String: "8760h0m0s").
func ParseDuration(s string) (time.Duration, error) {
	m := reDays.FindStringSubmatch(s)
	if m == nil {
		return time.ParseDuration(s)
	}
	days, _ := strconv.Atoi(m[1])
	d := time.Duration(days) * 24 * time.Hour
	if rest := s[len(m[0]):]; rest != "" {
		r, err := time.ParseDuration(rest)
		if err != nil || r < 0 || rest[0] == '-' || rest[0] == '+' {
			return 0, fmt.Errorf("time: invalid duration %q", s)
		}
		d += r
	}
	return d, nil
}

// ParseManifest decodes cairn.yaml. Unknown fields, fields of the wrong type, duplicate
// keys, bad durations and several YAML documents are errors; it does not check the
// values otherwise (see Validate). Every error is a *ValidationError (several are
// joined) with Path ManifestPath, matching ErrInvalid; YAML-level errors name the line.
//
// ParseManifest does not limit the size of data: the caller does (Extract and Scan
// enforce Limits.MaxManifestSize). It is safe for concurrent use.
func ParseManifest(data []byte) (m *Manifest, err error) {
	// yaml.v3 reports errors by panicking and recovering internally; should a hostile
	// document reach a panic it does not recover, it is still only a bad manifest.
	defer func() {
		if r := recover(); r != nil {
			m, err = nil, &ValidationError{Path: ManifestPath, Message: fmt.Sprintf("invalid YAML: %v", r)}
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var out Manifest
	if err := dec.Decode(&out); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &ValidationError{Path: ManifestPath, Message: "manifest is empty"}
		}
		return nil, yamlError(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, &ValidationError{Path: ManifestPath, Message: "manifest has more than one YAML document"}
	}
	return &out, nil
}

// yamlError turns a yaml.v3 error into ValidationErrors with readable messages.
func yamlError(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		return &ValidationError{Path: ManifestPath, Message: "invalid YAML: " + msg}
	}
	errs := make([]error, 0, len(te.Errors))
	for _, e := range te.Errors {
		errs = append(errs, &ValidationError{Path: ManifestPath, Message: rewriteTypeError(e)})
	}
	return errors.Join(errs...)
}

var (
	reUnknownField = regexp.MustCompile(`^(line \d+): field (.*) not found in type (\S+)$`)
	reFieldTwice   = regexp.MustCompile(`^(line \d+): field (.*) already set in type (\S+)$`)
	reCannot       = regexp.MustCompile("^(line \\d+): cannot unmarshal !!(\\w+)(?: `(.*)`)? into (\\S+)$")
)

// typeWords names Go types of yaml.v3 messages in words a user knows.
var typeWords = map[string]string{
	"[]bundle.Step":           "a list of steps",
	"bundle.Manifest":         "the manifest",
	"bundle.Defaults":         "defaults",
	"bundle.Step":             "a step",
	"bundle.HTTPSpec":         "an http spec",
	"bundle.LambdaSpec":       "a lambda spec",
	"bundle.RetryPolicy":      "a retry policy",
	"bundle.ConcurrencySpec":  "a concurrency limit",
	"bundle.RateLimitSpec":    "a rate limit",
	"bundle.Backoff":          "a backoff",
	"[]bundle.Schedule":       "a list of schedules",
	"bundle.Schedule":         "a schedule",
	"bundle.Overlap":          "an overlap policy",
	"bundle.TriggerRule":      "a trigger rule",
	"map[string]interface {}": "a mapping",
	"map[string]string":       "a mapping of strings",
	"[]string":                "a list of strings",
	"string":                  "a string",
	"float64":                 "a number",
	"int":                     "an integer",
}

// describeType returns the words for the Go type name t.
func describeType(t string) string {
	if w, ok := typeWords[strings.TrimPrefix(t, "*")]; ok {
		return w
	}
	return t
}

// rewriteTypeError rewrites one yaml.v3 TypeError message.
func rewriteTypeError(msg string) string {
	if m := reUnknownField.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("%s: unknown field %q in %s", m[1], m[2], describeType(m[3]))
	}
	if m := reFieldTwice.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("%s: field %q set twice in %s", m[1], m[2], describeType(m[3]))
	}
	if m := reCannot.FindStringSubmatch(msg); m != nil {
		if strings.Contains(msg, "`") {
			return fmt.Sprintf("%s: cannot use %q as %s", m[1], m[3], describeType(m[4]))
		}
		what := map[string]string{"seq": "a list", "map": "a mapping"}[m[2]]
		if what == "" {
			what = "a " + m[2]
		}
		return fmt.Sprintf("%s: cannot use %s as %s", m[1], what, describeType(m[4]))
	}
	return msg
}
