package bundle

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// DefinitionSchema is the version of the Definition format, in Definition.Schema.
const DefinitionSchema = 1

// Default retry values, used when neither a step nor the defaults set a field.
const (
	DefaultMaxAttempts = 1
	// DefaultMaxInterruptions is RetryPolicy.MaxInterruptions' default. The
	// catalog applies it (cairn_step_max_interruptions, catalog/sql/steps.sql) to a
	// step whose definition has none.
	DefaultMaxInterruptions = 5
	DefaultBackoff          = BackoffFixed
	DefaultRetryDelay       = time.Second
	// DefaultMaxDelayFloor is the default max_delay when the delay is shorter; a
	// longer delay is its own default max_delay.
	DefaultMaxDelayFloor = time.Hour
	DefaultOnExhausted   = OnExhaustedFail
)

// Kind is the function kind of a step.
type Kind string

// The function kinds.
const (
	KindExec    Kind = "exec"
	KindHTTP    Kind = "http"
	KindLambda  Kind = "lambda"
	KindBuiltin Kind = "builtin"
)

// Definition is a normalized manifest: defaults applied to every step, needs sorted and
// deduplicated, steps in a stable topological order (a step after all it needs; among
// the steps ready at the same point, by key). It is self-contained: the catalog stores
// it (as JSON) and the engine compiles it without the manifest. Its canonical JSON is
// encoding/json's output of the struct (fixed field order, sorted map keys), whose
// SHA-256 is the Fingerprint. Two manifests that differ only in step order, needs
// order or duplicates, or in spelling out defaults, have the same fingerprint.
type Definition struct {
	// Schema is DefinitionSchema.
	Schema int `json:"schema"`
	// Name is the workflow's name.
	Name string `json:"name"`
	// Description is the manifest's description.
	Description string `json:"description,omitempty"`
	// Steps in topological order.
	Steps []StepDefinition `json:"steps"`
	// Hooks are the manifest's webhooks, input filled in (DefaultHookInput); absent
	// when there are none, so that definitions without hooks keep their fingerprint.
	Hooks []Hook `json:"hooks,omitempty"`
	// Schedules in manifest order; absent when there are none.
	Schedules []ScheduleDefinition `json:"schedules,omitempty"`
	// Triggers and CancelOn as the manifest has them (event.go); absent when
	// there are none.
	Triggers []Trigger  `json:"triggers,omitempty"`
	CancelOn []CancelOn `json:"cancel_on,omitempty"`
	// Timeout bounds a whole run (and in milliseconds); absent: no bound.
	Timeout   *Duration `json:"timeout,omitempty"`
	TimeoutMS int64     `json:"timeout_ms,omitempty"`
	// Retention of the finished runs (retention.go); absent: the server's default.
	Retention *RetentionDefinition `json:"retention,omitempty"`
	// OnFailure are the steps run once when a run fails, in manifest order;
	// absent when there are none.
	OnFailure []StepDefinition `json:"on_failure,omitempty"`
}

// StepDefinition is one normalized step. Exactly one of Exec, HTTP, Lambda, Builtin,
// Sleep, Signal and Workflow is set, as Kind says.
type StepDefinition struct {
	Key string `json:"key"`
	// Needs is sorted and duplicate-free; never nil.
	Needs []string `json:"needs"`
	Kind  Kind     `json:"kind"`
	// Exec is set for KindExec.
	Exec *ExecDefinition `json:"exec,omitempty"`
	// HTTP is set for KindHTTP; header names are canonical ("X-Api-Key").
	HTTP *HTTPSpec `json:"http,omitempty"`
	// Lambda is set for KindLambda.
	Lambda *LambdaSpec `json:"lambda,omitempty"`
	// Builtin is set for KindBuiltin.
	Builtin string `json:"builtin,omitempty"`
	// Sleep is set for KindSleep, Signal for KindSignal (wait.go).
	Sleep  *SleepDefinition  `json:"sleep,omitempty"`
	Signal *SignalDefinition `json:"signal,omitempty"`
	// WaitForEvent is set for KindWaitForEvent (event.go).
	WaitForEvent *WaitForEventDefinition `json:"wait_for_event,omitempty"`
	// Approval is set for KindApproval (approval.go).
	Approval *ApprovalDefinition `json:"approval,omitempty"`
	// Workflow is set for KindWorkflow (workflow_step.go).
	Workflow *WorkflowDefinition `json:"workflow,omitempty"`
	// Map, when set, runs the step once per item (map.go).
	Map *MapDefinition `json:"map,omitempty"`
	// With holds the static parameters as JSON values (strings, float64 or int64 or
	// json.Number numbers, bools, nil, []any, map[string]any); never nil.
	With map[string]any `json:"with"`
	// Timeout of one attempt, and the same in milliseconds.
	Timeout   Duration `json:"timeout"`
	TimeoutMS int64    `json:"timeout_ms"`
	// Retry is the effective retry policy.
	Retry RetryDefinition `json:"retry"`
	// Network is NetworkNone for an exec step without network; empty otherwise.
	Network string `json:"network,omitempty"`
	// NetworkAllow lists the ports of the server's host an exec step's handler
	// may reach ("localhost:5432", sorted; network.go); empty otherwise.
	NetworkAllow []string `json:"network_allow,omitempty"`
	// Env is an exec step's environment (the defaults' env under its own):
	// plain values and secret references, never secret values; nil when empty.
	Env map[string]Value `json:"env,omitempty"`
	// Resources bounds an exec step's handler; nil: unbounded.
	Resources *ResourcesDefinition `json:"resources,omitempty"`
	// Concurrency is the step's effective concurrency limit (flow.go); nil: none.
	Concurrency *ConcurrencyDefinition `json:"concurrency,omitempty"`
	// RateLimit is the step's effective rate limit (flow.go); nil: none.
	RateLimit *RateLimitDefinition `json:"rate_limit,omitempty"`
	// Priority is the step's priority when set (its own or the defaults'); nil:
	// DefaultPriority.
	Priority *int `json:"priority,omitempty"`
	// RunsOn is the tags a dispatcher needs to claim the step, sorted and
	// duplicate-free; nil: any dispatcher.
	RunsOn []string `json:"runs_on,omitempty"`
	// QueueTimeout (and in milliseconds) bounds the wait of the ready step to
	// start; nil: no bound.
	QueueTimeout   *Duration `json:"queue_timeout,omitempty"`
	QueueTimeoutMS int64     `json:"queue_timeout_ms,omitempty"`
	// When is the step's condition (CEL), empty for none (condition.go).
	When string `json:"when,omitempty"`
	// After is the step's trigger rule; empty for the default, all_succeeded, so
	// that definitions without one keep their fingerprint.
	After TriggerRule `json:"after,omitempty"`
	// Compensate is the step's compensation: a step of key CompensateKey(Key),
	// needing this step, of a function kind.
	Compensate *StepDefinition `json:"compensate,omitempty"`
}

// ExecDefinition is the program of an exec step.
type ExecDefinition struct {
	// Path is the program's clean path relative to the bundle root: "bin/fetch".
	// Run it as filepath.Join(bundleDir, filepath.FromSlash(Path)), never through PATH.
	Path string `json:"path"`
	// Args are the arguments after the program; never nil.
	Args []string `json:"args"`
}

// RetryDefinition is an effective retry policy: every field filled in.
type RetryDefinition struct {
	// MaxAttempts counts the first try: 1..100.
	MaxAttempts int     `json:"max_attempts"`
	Backoff     Backoff `json:"backoff"`
	// Delay and MaxDelay, as strings and in milliseconds; MaxDelay >= Delay.
	Delay      Duration `json:"delay"`
	DelayMS    int64    `json:"delay_ms"`
	MaxDelay   Duration `json:"max_delay"`
	MaxDelayMS int64    `json:"max_delay_ms"`
	// Jitter is a fraction of the delay, 0..1.
	Jitter float64 `json:"jitter"`
	// OnExhausted is fail or pause (see RetryPolicy.OnExhausted).
	OnExhausted OnExhausted `json:"on_exhausted"`
	// MaxInterruptions is RetryPolicy.MaxInterruptions; 0 when unset (the
	// catalog then applies DefaultMaxInterruptions), so that definitions without
	// it keep their fingerprint.
	MaxInterruptions int `json:"max_interruptions,omitempty"`
}

// Normalize validates m without file checks (see Validate; use Validate with the
// bundle's Tree for those) and returns its Definition: every step gets its timeout
// (the step's, else the defaults', else 5m) and its retry policy, field by field (the
// step's, else the defaults', else max_attempts 1, backoff fixed, delay 1s,
// max_delay max(delay, 1h), jitter 0). The errors are Validate's.
func (m *Manifest) Normalize() (*Definition, error) {
	if err := m.Validate(nil); err != nil {
		return nil, err
	}
	timeout := Duration(DefaultTimeout)
	var defaults RetryPolicy
	var defaultConc *ConcurrencySpec
	var defaultRate *RateLimitSpec
	var defaultPriority *int
	var defaultQueue *Duration
	var defaultEnv map[string]Value
	var defaultNetwork *Network
	if m.Defaults != nil {
		defaultQueue = m.Defaults.QueueTimeout
		defaultEnv = m.Defaults.Env
		defaultNetwork = m.Defaults.Network
		defaultConc, defaultRate, defaultPriority = m.Defaults.Concurrency, m.Defaults.RateLimit, m.Defaults.Priority
		if m.Defaults.Timeout != nil {
			timeout = *m.Defaults.Timeout
		}
		if m.Defaults.Retry != nil {
			defaults = *m.Defaults.Retry
		}
	}
	byKey := make(map[string]StepDefinition, len(m.Steps))
	for _, s := range m.Steps {
		d, err := normalizeStep(s, timeout, defaults)
		if err != nil {
			return nil, err
		}
		applyEnv(&d, &s, defaultEnv)
		applyNetwork(&d, &s, defaultNetwork)
		// Flow control (flow.go) applies to the steps of the DAG and to their
		// compensations: their own settings, else the defaults.
		fd := flowDefaults{conc: defaultConc, rate: defaultRate, priority: defaultPriority, queue: defaultQueue, workflow: m.Name}
		fd.apply(&d, &s)
		if d.Compensate != nil && s.Compensate != nil {
			fd.apply(d.Compensate, s.Compensate)
		}
		byKey[s.Key] = d
	}
	def := &Definition{Schema: DefinitionSchema, Name: m.Name, Description: m.Description,
		Hooks: normalizeHooks(m.Hooks), Schedules: normalizeSchedules(m.Schedules),
		Triggers: m.Triggers, CancelOn: m.CancelOn}
	if m.Timeout != nil {
		t := *m.Timeout
		def.Timeout, def.TimeoutMS = &t, t.Std().Milliseconds()
	}
	def.Retention = normalizeRetention(m.Retention)
	for _, key := range topoOrder(byKey) {
		def.Steps = append(def.Steps, byKey[key])
	}
	for _, s := range m.OnFailure {
		d, err := normalizeStep(s, timeout, defaults)
		if err != nil {
			return nil, err
		}
		applyEnv(&d, &s, defaultEnv)
		applyNetwork(&d, &s, defaultNetwork)
		flowDefaults{conc: defaultConc, rate: defaultRate, priority: defaultPriority, queue: defaultQueue, workflow: m.Name}.apply(&d, &s)
		def.OnFailure = append(def.OnFailure, d)
	}
	return def, nil
}

// normalizeStep returns the definition of one step (of steps, on_failure, or a
// compensate body) with the manifest's default timeout and retry policy applied.
func normalizeStep(s Step, timeout Duration, defaults RetryPolicy) (StepDefinition, error) {
	d := StepDefinition{
		Key:     s.Key,
		Needs:   dedupe(s.Needs),
		Timeout: timeout,
		Retry:   effectiveRetry(RetryPolicy{}, defaults),
	}
	if s.Timeout != nil {
		d.Timeout = *s.Timeout
	}
	d.TimeoutMS = d.Timeout.Std().Milliseconds()
	if s.Retry != nil {
		d.Retry = effectiveRetry(*s.Retry, defaults)
	}
	with, werr := normalizeWith(s.With)
	if werr != nil {
		// Validate checked it; this cannot happen.
		return d, fieldError(s.Key, "with"+werr.at, "%s", werr.msg)
	}
	d.With = with
	normalizeMapSpec(&s, &d)
	switch {
	case normalizeWait(&s, &d), normalizeWaitForEvent(&s, &d), normalizeApproval(&s, &d), normalizeWorkflow(&s, &d):
	case s.Exec != nil:
		p, _ := execPath(s.Exec[0])
		d.Kind = KindExec
		d.Exec = &ExecDefinition{Path: p, Args: append([]string{}, s.Exec[1:]...)}
		normalizeResources(&s, &d)
	case s.HTTP != nil:
		d.Kind = KindHTTP
		h := &HTTPSpec{URL: s.HTTP.URL}
		if len(s.HTTP.Headers) > 0 {
			h.Headers = make(map[string]Value, len(s.HTTP.Headers))
			for k, v := range s.HTTP.Headers {
				h.Headers[textproto.CanonicalMIMEHeaderKey(k)] = v
			}
		}
		d.HTTP = h
	case s.Lambda != nil:
		d.Kind = KindLambda
		l := *s.Lambda
		d.Lambda = &l
	default:
		d.Kind = KindBuiltin
		d.Builtin = s.Builtin
	}
	if err := normalizeConditions(&s, &d, timeout, defaults); err != nil {
		return d, err
	}
	return d, nil
}

// topoOrder returns the step keys in topological order (needs first), taking the
// smallest key among the ready steps each time. The graph is acyclic (validated).
func topoOrder(steps map[string]StepDefinition) []string {
	pending := make(map[string]int, len(steps)) // key → needs not yet ordered
	dependents := make(map[string][]string, len(steps))
	var ready []string
	for key, s := range steps {
		pending[key] = len(s.Needs)
		for _, n := range s.Needs {
			dependents[n] = append(dependents[n], key)
		}
		if len(s.Needs) == 0 {
			ready = append(ready, key)
		}
	}
	slices.Sort(ready)
	order := make([]string, 0, len(steps))
	for len(ready) > 0 {
		key := ready[0]
		ready = ready[1:]
		order = append(order, key)
		for _, d := range dependents[key] {
			pending[d]--
			if pending[d] == 0 {
				i, _ := slices.BinarySearch(ready, d)
				ready = slices.Insert(ready, i, d)
			}
		}
	}
	return order
}

// effectiveRetry fills each field of p from defaults, then from the built-in default.
func effectiveRetry(p, defaults RetryPolicy) RetryDefinition {
	r := RetryDefinition{MaxAttempts: DefaultMaxAttempts, Backoff: DefaultBackoff, Delay: Duration(DefaultRetryDelay),
		OnExhausted: DefaultOnExhausted}
	for _, src := range []RetryPolicy{defaults, p} {
		if src.MaxAttempts != nil {
			r.MaxAttempts = *src.MaxAttempts
		}
		if src.Backoff != "" {
			r.Backoff = src.Backoff
		}
		if src.Delay != nil {
			r.Delay = *src.Delay
		}
		if src.Jitter != nil {
			r.Jitter = *src.Jitter
		}
		if src.OnExhausted != "" {
			r.OnExhausted = src.OnExhausted
		}
		if src.MaxInterruptions != nil {
			r.MaxInterruptions = *src.MaxInterruptions
		}
	}
	switch {
	case p.MaxDelay != nil:
		r.MaxDelay = *p.MaxDelay
	case defaults.MaxDelay != nil:
		r.MaxDelay = *defaults.MaxDelay
	default:
		r.MaxDelay = max(r.Delay, Duration(DefaultMaxDelayFloor))
	}
	r.DelayMS = r.Delay.Std().Milliseconds()
	r.MaxDelayMS = r.MaxDelay.Std().Milliseconds()
	return r
}

// CanonicalJSON returns the canonical JSON encoding of d, the bytes the fingerprint
// hashes: encoding/json's compact output, HTML characters escaped.
func (d *Definition) CanonicalJSON() ([]byte, error) {
	b, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("encode definition: %w", err)
	}
	return b, nil
}

// Fingerprint returns "sha256:" + the lower-case hex SHA-256 of CanonicalJSON. It fails
// only for a Definition not made by Normalize or ParseDefinition holding values JSON
// cannot encode.
//
// Compute it once and store it beside the definition: re-encoding a definition read
// back from PostgreSQL jsonb gives the same bytes for the values Normalize produces,
// but jsonb may rewrite unusual numbers (1e21) in a with parameter.
func (d *Definition) Fingerprint() (string, error) {
	b, err := d.CanonicalJSON()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// Step returns the step with the given key.
func (d *Definition) Step(key string) (*StepDefinition, bool) {
	for i := range d.Steps {
		if d.Steps[i].Key == key {
			return &d.Steps[i], true
		}
	}
	return nil, false
}

// ParseDefinition decodes a Definition from JSON (as stored by the catalog). Numbers in
// With decode as json.Number, so they re-encode exactly. It checks the schema version
// only: the definition is trusted to come from Normalize.
func ParseDefinition(data []byte) (*Definition, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var d Definition
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("decode definition: %w", err)
	}
	if d.Schema != DefinitionSchema {
		return nil, fmt.Errorf("decode definition: unsupported schema %d (want %d)", d.Schema, DefinitionSchema)
	}
	return &d, nil
}

// withError locates a bad value in a step's "with": at is a suffix of the field path
// (".a.b[2]").
type withError struct{ at, msg string }

// normalizeWith converts a step's "with" parameters, as decoded from YAML, to JSON
// values; it refuses what JSON cannot hold (non-string keys, NaN, invalid UTF-8) and
// nesting deeper than maxWithDepth. A nil map becomes an empty one.
func normalizeWith(m map[string]any) (map[string]any, *withError) {
	out, err := normalizeMap(m, "", 0)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// normalizeMap normalizes the values of m in key order, so that the error reported for
// a map with several bad values is always the same.
func normalizeMap(m map[string]any, at string, depth int) (map[string]any, *withError) {
	out := make(map[string]any, len(m))
	for _, k := range sortedKeys(m) {
		if !utf8.ValidString(k) {
			return nil, &withError{withKey(at, k), "key is not valid UTF-8"}
		}
		if strings.IndexByte(k, 0) >= 0 {
			// The catalog stores the definition as jsonb, which cannot hold U+0000.
			return nil, &withError{withKey(at, k), "key contains a NUL character"}
		}
		nv, err := normalizeValue(m[k], withKey(at, k), depth+1)
		if err != nil {
			return nil, err
		}
		out[k] = nv
	}
	return out, nil
}

func normalizeValue(v any, at string, depth int) (any, *withError) {
	if depth > maxWithDepth {
		return nil, &withError{at, fmt.Sprintf("nested more than %d levels deep", maxWithDepth)}
	}
	switch x := v.(type) {
	case nil, bool, int64, uint64, json.Number:
		return x, nil
	case int:
		return int64(x), nil
	case string:
		if !utf8.ValidString(x) {
			return nil, &withError{at, "string is not valid UTF-8"}
		}
		if strings.IndexByte(x, 0) >= 0 {
			return nil, &withError{at, "string contains a NUL character"}
		}
		return x, nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, &withError{at, fmt.Sprintf("%v is not a JSON number", x)}
		}
		return x, nil
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano), nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			nv, err := normalizeValue(e, at+"["+strconv.Itoa(i)+"]", depth+1)
			if err != nil {
				return nil, err
			}
			out[i] = nv
		}
		return out, nil
	case map[string]any:
		return normalizeMap(x, at, depth)
	case map[any]any:
		m := make(map[string]any, len(x))
		var bad []string
		for k, e := range x {
			ks, ok := k.(string)
			if !ok {
				bad = append(bad, fmt.Sprint(k))
				continue
			}
			m[ks] = e
		}
		if len(bad) > 0 {
			slices.Sort(bad)
			return nil, &withError{at, fmt.Sprintf("key %s is not a string", bad[0])}
		}
		return normalizeMap(m, at, depth)
	default:
		return nil, &withError{at, fmt.Sprintf("unsupported value of type %T", v)}
	}
}

// withKey appends a map key to a field path: ".name", or `["odd key"]`.
func withKey(at, k string) string {
	if reKey.MatchString(k) {
		return at + "." + k
	}
	return at + "[" + strconv.Quote(k) + "]"
}
