package bundle

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/textproto"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// FileChecker answers the manifest validation's questions about the bundle's files.
// *Tree implements it.
type FileChecker interface {
	// FileMode returns the mode of the regular file at the relative slash path p,
	// following symlinks inside the bundle, and false when there is no such file.
	FileMode(p string) (fs.FileMode, bool)
}

// Manifest limits and built-in values.
const (
	// MaxTimeout bounds a step's timeout, and MaxRetryDelay its retry delays.
	MaxTimeout    = 24 * time.Hour
	MaxRetryDelay = 24 * time.Hour
	// MaxAttempts bounds RetryPolicy.MaxAttempts and MaxInterruptions.
	MaxAttempts = 100
	// DefaultTimeout is a step's timeout when neither it nor the defaults set one.
	DefaultTimeout = 5 * time.Minute
	// maxDescription bounds Manifest.Description, in bytes.
	maxDescription = 4096
	// maxWithDepth bounds the nesting of a step's "with" parameters.
	maxWithDepth = 32
)

// Builtins are the names of the built-in functions.
var Builtins = []string{"noop", "echo", "sleep", "fail"}

var (
	reName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	reKey  = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	// reQualifier follows Lambda's rule for versions and aliases.
	reQualifier = regexp.MustCompile(`^[A-Za-z0-9$_-]{1,128}$`)
)

// ValidName reports whether name can name a workflow: 1 to 63 of a-z, 0-9 and
// '-', starting with a letter or digit.
func ValidName(name string) bool { return reName.MatchString(name) }

// Validate checks m against the manifest's rules and reports every violation, each
// a *ValidationError naming the step and the field, joined with errors.Join (nil if m
// is valid): the name and key syntax, unique keys, at least one step, needs naming
// existing other steps, no dependency cycle (the message spells the cycle,
// "a → b → a", where x → y means x needs y), exactly one function kind per step, a
// known built-in, an absolute http(s) URL, a lambda function name, timeouts in
// (0, 24h], retry policies in range (max_attempts 1..100, delays 0..24h, max_delay >=
// delay after defaults are applied, backoff fixed|linear|exponential, jitter 0..1).
//
// With files non-nil, an exec step's program must be an executable regular file of the
// bundle (symlinks inside the bundle are followed); with nil files that check is
// skipped. Validate does not modify m and is safe for concurrent use.
func (m *Manifest) Validate(files FileChecker) error {
	v := &validator{files: files}
	v.manifest(m)
	return joinErrors(v.errs)
}

// validateStepCount checks m's number of steps against lim.MaxSteps (lim has its
// defaults applied), before the rest of the validation spends time on every step.
func validateStepCount(m *Manifest, lim Limits) error {
	if n := len(m.Steps); n > lim.MaxSteps {
		return fieldError("", "steps", "%d steps, over the limit of %d steps per workflow", n, lim.MaxSteps)
	}
	return nil
}

// validator collects the errors of one Validate call.
type validator struct {
	files FileChecker
	errs  []*ValidationError
	// defaults is the manifest's default retry policy.
	defaults RetryPolicy
}

func (v *validator) add(step, field, format string, args ...any) {
	v.errs = append(v.errs, fieldError(step, field, format, args...))
}

func (v *validator) manifest(m *Manifest) {
	switch {
	case m.Name == "":
		v.add("", "name", "required")
	case !reName.MatchString(m.Name):
		v.add("", "name", "%q must be 1 to 63 lower-case letters, digits and hyphens, starting with a letter or digit", m.Name)
	}
	switch {
	case len(m.Description) > maxDescription:
		v.add("", "description", "is %d bytes long, over the %d-byte limit", len(m.Description), maxDescription)
	case !utf8.ValidString(m.Description):
		v.add("", "description", "is not valid UTF-8")
	case strings.IndexByte(m.Description, 0) >= 0:
		v.add("", "description", "contains a NUL character")
	}
	if m.Timeout != nil && (m.Timeout.Std() <= 0 || m.Timeout.Std() > MaxSleep) {
		v.add("", "timeout", "timeout %s: must be > 0 and at most %s (a year)", *m.Timeout, Duration(MaxSleep))
	}
	v.retention(m.Retention)
	var defaults RetryPolicy
	if m.Defaults != nil {
		if m.Defaults.Timeout != nil {
			v.timeout("", "defaults.timeout", *m.Defaults.Timeout)
		}
		if m.Defaults.Retry != nil {
			defaults = *m.Defaults.Retry
			v.defaults = defaults
			v.retry("", "defaults.retry", defaults, RetryPolicy{})
		}
		if m.Defaults.Concurrency != nil {
			v.concurrency("", "defaults.concurrency", m.Defaults.Concurrency)
		}
		if m.Defaults.RateLimit != nil {
			v.rateLimit("", "defaults.rate_limit", m.Defaults.RateLimit)
		}
		if q := m.Defaults.QueueTimeout; q != nil {
			v.queueTimeout("", "defaults.queue_timeout", *q)
		}
		v.network("", "defaults", m.Defaults.Network, true)
		if m.Defaults.Env != nil {
			v.env("", "defaults.env", m.Defaults.Env)
		}
		if p := m.Defaults.Priority; p != nil && (*p < MinPriority || *p > MaxPriority) {
			v.add("", "defaults.priority", "priority %d: must be %d to %d", *p, MinPriority, MaxPriority)
		}
	}
	v.hooks(m.Hooks)
	v.schedules(m.Schedules)
	v.events(m)
	if len(m.Steps) == 0 {
		v.add("", "steps", "at least one step is required")
		return
	}
	first := make(map[string]int, len(m.Steps)) // key → index of its first step
	for i, s := range m.Steps {
		f := fmt.Sprintf("steps[%d]", i)
		switch {
		case s.Key == "":
			v.add("", f+".key", "required")
		case !reKey.MatchString(s.Key):
			v.add(s.Key, f+".key", "%q must be 1 to 63 lower-case letters, digits, '_' and '-', starting with a letter or digit", s.Key)
		default:
			if j, dup := first[s.Key]; dup {
				v.add(s.Key, f+".key", "duplicate step key %q (first used by steps[%d])", s.Key, j)
			} else {
				first[s.Key] = i
			}
		}
	}
	for i, s := range m.Steps {
		v.step(fmt.Sprintf("steps[%d]", i), s, first, defaults)
	}
	v.cycles(m.Steps, first)
	compensations := map[string]string{}
	for _, s := range m.Steps {
		if s.Compensate != nil {
			compensations[CompensateKey(s.Key)] = s.Key
		}
	}
	v.onFailure(m.OnFailure, first, compensations)
	v.placeSharedKeys(m)
}

// placeSharedKeys marks the errors about a step whose key another step has too:
// the key does not say which step, so Error names the step by its place.
func (v *validator) placeSharedKeys(m *Manifest) {
	count := map[string]int{}
	for _, s := range slices.Concat(m.Steps, m.OnFailure) {
		count[s.Key]++
	}
	for _, e := range v.errs {
		if count[e.Step] > 1 {
			e.byPlace = true
		}
	}
}

// step checks one step but its place in the graph.
func (v *validator) step(f string, s Step, keys map[string]int, defaults RetryPolicy) {
	for _, n := range s.Needs {
		switch _, ok := keys[n]; {
		case n == s.Key:
			v.add(s.Key, f+".needs", "needs itself")
		case !ok:
			v.add(s.Key, f+".needs", "needs unknown step %q", n)
		}
	}
	var kinds []string
	if s.Exec != nil {
		kinds = append(kinds, "exec")
		v.exec(s.Key, f+".exec", s.Exec)
	}
	if s.HTTP != nil {
		kinds = append(kinds, "http")
		v.http(s.Key, f+".http", s.HTTP)
	}
	if s.Lambda != nil {
		kinds = append(kinds, "lambda")
		v.lambda(s.Key, f+".lambda", s.Lambda)
	}
	if s.Builtin != "" {
		kinds = append(kinds, "builtin")
		v.builtin(s.Key, f, s.Builtin, s.With)
	}
	kinds = append(kinds, v.waitKinds(f, s)...)
	kinds = append(kinds, v.approvalKind(f, s)...)
	kinds = append(kinds, v.workflowKind(f, s)...)
	v.mapSpec(f, s, kinds)
	v.network(s.Key, f, s.Network, s.Exec != nil)
	v.stepEnv(s.Key, f, s)
	v.resources(s.Key, f, s)
	switch len(kinds) {
	case 0:
		v.add(s.Key, f, "has no function: set exactly one of exec, http, lambda, builtin, sleep, signal, wait_for_event, approval, workflow")
	case 1:
	default:
		v.add(s.Key, f, "sets %s: set exactly one of exec, http, lambda, builtin, sleep, signal, wait_for_event, approval, workflow", strings.Join(kinds, " and "))
	}
	if s.With != nil {
		if _, err := normalizeWith(s.With); err != nil {
			v.add(s.Key, f+".with"+err.at, "%s", err.msg)
		}
	}
	if s.Timeout != nil {
		v.timeout(s.Key, f+".timeout", *s.Timeout)
	}
	if s.Retry != nil {
		v.retry(s.Key, f+".retry", *s.Retry, defaults)
	}
	v.flow(s.Key, f, s)
	v.conditions(f, s, keys)
}

func (v *validator) exec(key, f string, argv []string) {
	if len(argv) == 0 || argv[0] == "" {
		v.add(key, f, "must name a program of the bundle, like [\"./bin/fetch\"]")
		return
	}
	for i, a := range argv {
		if strings.IndexByte(a, 0) >= 0 {
			v.add(key, fmt.Sprintf("%s[%d]", f, i), "contains a NUL byte")
			return
		}
	}
	prog := argv[0]
	p, ok := execPath(prog)
	if !ok {
		v.add(key, f, "program %q must be a relative path inside the bundle, like \"./bin/fetch\"", prog)
		return
	}
	if v.files == nil {
		return
	}
	mode, ok := v.files.FileMode(p)
	switch {
	case !ok:
		v.add(key, f, "program %q is not a file of the bundle", prog)
	case mode&0o111 == 0:
		v.add(key, f, "program %q is not executable (mode %04o): set its execute bit", prog, mode.Perm())
	}
}

// execPath returns the clean bundle path of an exec program ("./bin/fetch" →
// "bin/fetch"), and false when it is absolute or leaves the bundle.
func execPath(prog string) (string, bool) {
	if strings.HasPrefix(prog, "/") || strings.ContainsRune(prog, '\\') || leaves(prog) {
		return "", false
	}
	p := path.Clean(prog)
	if p == "." {
		return "", false
	}
	return p, true
}

// reservedHeaders are set by Cairn on every http call and cannot be overridden.
var reservedHeaders = []string{"Idempotency-Key", "Content-Type", "Content-Length", "Host", "Transfer-Encoding"}

func (v *validator) http(key, f string, h *HTTPSpec) {
	u, err := url.Parse(h.URL)
	switch {
	case h.URL == "":
		v.add(key, f+".url", "required")
	case err != nil:
		v.add(key, f+".url", "%q is not a valid URL", h.URL)
	case u.Scheme != "http" && u.Scheme != "https":
		v.add(key, f+".url", "%q must be an absolute http or https URL", h.URL)
	case u.Host == "":
		v.add(key, f+".url", "%q has no host", h.URL)
	case u.User != nil:
		v.add(key, f+".url", "%q must not hold credentials; use headers", redactURL(u))
	}
	seen := make(map[string]string, len(h.Headers))
	for _, name := range sortedKeys(h.Headers) {
		value := h.Headers[name]
		canon := textproto.CanonicalMIMEHeaderKey(name)
		hf := fmt.Sprintf("%s.headers[%q]", f, name)
		switch {
		case !validHeaderName(name):
			v.add(key, hf, "invalid header name %q", name)
		case strings.HasPrefix(canon, "Cairn-") || slices.Contains(reservedHeaders, canon):
			v.add(key, hf, "header %q is set by Cairn and cannot be overridden", canon)
		case value.IsSecret():
			v.valueRef(key, hf, value)
		case strings.ContainsAny(value.Plain, "\r\n\x00"):
			v.add(key, hf, "header value contains a line break or NUL")
		case seen[canon] != "":
			v.add(key, hf, "header %q is also given as %q", name, seen[canon])
		}
		seen[canon] = name
	}
}

// redactURL prints u without its password.
func redactURL(u *url.URL) string { return u.Redacted() }

// validHeaderName reports whether name is an HTTP token (RFC 9110).
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

func (v *validator) lambda(key, f string, l *LambdaSpec) {
	switch {
	case l.Function == "":
		v.add(key, f+".function", "required")
	case len(l.Function) > 256 || strings.ContainsFunc(l.Function, func(r rune) bool { return r <= ' ' || r == 0x7f }) || !utf8.ValidString(l.Function):
		v.add(key, f+".function", "%q is not a Lambda function name or ARN", truncate(l.Function))
	}
	if l.Qualifier != "" && !reQualifier.MatchString(l.Qualifier) {
		v.add(key, f+".qualifier", "%q is not a Lambda version or alias", truncate(l.Qualifier))
	}
}

// builtin checks a built-in's name and the parameters the documented built-ins take:
// sleep's "duration" (a duration string) and fail's "times" (an integer >= 0).
func (v *validator) builtin(key, f, name string, with map[string]any) {
	if !slices.Contains(Builtins, name) {
		v.add(key, f+".builtin", "unknown built-in %q (known: %s)", name, strings.Join(Builtins, ", "))
		return
	}
	switch name {
	case "sleep":
		if d, ok := with["duration"]; ok {
			s, isString := d.(string)
			dur, err := time.ParseDuration(s)
			if !isString || err != nil || dur < 0 || dur > MaxTimeout {
				v.add(key, f+".with.duration", "sleep duration %v must be a duration string between 0s and 24h, like \"2s\"", d)
			}
		}
	case "fail":
		if t, ok := with["times"]; ok {
			if n, isInt := asInt(t); !isInt || n < 0 {
				v.add(key, f+".with.times", "fail times %v must be an integer >= 0", t)
			}
		}
	}
}

// asInt returns v as an int64 if it is an integer of any Go type YAML decodes to.
func asInt(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int64:
		return n, true
	case uint64:
		if n > math.MaxInt64 {
			return 0, false
		}
		return int64(n), true
	case float64:
		if n == math.Trunc(n) && math.Abs(n) < 1<<53 {
			return int64(n), true
		}
	}
	return 0, false
}

func (v *validator) timeout(key, f string, d Duration) {
	switch {
	case d <= 0:
		v.add(key, f, "timeout %s must be positive", d)
	case d.Std() > MaxTimeout:
		v.add(key, f, "timeout %s is over the 24h limit", d)
	}
}

// retry checks the policy p as written, then the effective policy it makes with the
// defaults' policy (zero when checking the defaults themselves).
func (v *validator) retry(key, f string, p, defaults RetryPolicy) {
	if p.MaxAttempts != nil && (*p.MaxAttempts < 1 || *p.MaxAttempts > MaxAttempts) {
		v.add(key, f+".max_attempts", "%d is out of range 1..%d", *p.MaxAttempts, MaxAttempts)
	}
	if p.MaxInterruptions != nil && (*p.MaxInterruptions < 1 || *p.MaxInterruptions > MaxAttempts) {
		v.add(key, f+".max_interruptions", "%d is out of range 1..%d", *p.MaxInterruptions, MaxAttempts)
	}
	switch p.Backoff {
	case "", BackoffFixed, BackoffLinear, BackoffExponential:
	default:
		v.add(key, f+".backoff", "unknown backoff %q (known: fixed, linear, exponential)", p.Backoff)
	}
	ok := true
	for _, d := range []struct {
		name string
		d    *Duration
	}{{"delay", p.Delay}, {"max_delay", p.MaxDelay}} {
		switch {
		case d.d == nil:
		case *d.d < 0:
			v.add(key, f+"."+d.name, "%s %s must not be negative", d.name, *d.d)
			ok = false
		case d.d.Std() > MaxRetryDelay:
			v.add(key, f+"."+d.name, "%s %s is over the 24h limit", d.name, *d.d)
			ok = false
		}
	}
	if p.Jitter != nil && !(*p.Jitter >= 0 && *p.Jitter <= 1) {
		v.add(key, f+".jitter", "%v is out of range 0..1", *p.Jitter)
	}
	switch p.OnExhausted {
	case "", OnExhaustedFail, OnExhaustedPause:
	default:
		v.add(key, f+".on_exhausted", "unknown on_exhausted %q (known: fail, pause)", p.OnExhausted)
	}
	if !ok {
		return
	}
	eff := effectiveRetry(p, defaults)
	if eff.MaxDelay < eff.Delay {
		v.add(key, f+".max_delay", "max_delay %s is less than delay %s (after defaults)", eff.MaxDelay, eff.Delay)
	}
}

// cycles reports every dependency cycle found by a depth-first search in manifest
// order, once per back edge.
func (v *validator) cycles(steps []Step, keys map[string]int) {
	const (
		white = iota
		gray
		black
	)
	color := make([]int, len(steps))
	var stack []int
	var visit func(i int)
	visit = func(i int) {
		color[i] = gray
		stack = append(stack, i)
		for _, n := range dedupe(steps[i].Needs) {
			j, ok := keys[n]
			if !ok || j == i || steps[j].Key != n {
				continue // reported by step
			}
			switch color[j] {
			case white:
				visit(j)
			case gray:
				at := slices.Index(stack, j)
				names := make([]string, 0, len(stack)-at+1)
				for _, k := range stack[at:] {
					names = append(names, steps[k].Key)
				}
				names = append(names, n)
				v.add(steps[j].Key, fmt.Sprintf("steps[%d].needs", j),
					"is part of a dependency cycle: %s", strings.Join(names, " → "))
			}
		}
		stack = stack[:len(stack)-1]
		color[i] = black
	}
	for i, s := range steps {
		if j, ok := keys[s.Key]; ok && j == i && color[i] == white {
			visit(i)
		}
	}
}

// dedupe returns the sorted distinct elements of s, never nil.
func dedupe(s []string) []string {
	out := append(make([]string, 0, len(s)), s...)
	slices.Sort(out)
	return slices.Compact(out)
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// joinErrors joins ValidationErrors, nil when there are none.
func joinErrors(errs []*ValidationError) error {
	if len(errs) == 0 {
		return nil
	}
	if len(errs) == 1 {
		return errs[0]
	}
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = e
	}
	return errors.Join(out...)
}

// flow checks the flow settings of a step, a compensation or an on_failure step (f
// its field path).
func (v *validator) flow(key, f string, s Step) {
	if s.Concurrency != nil {
		v.concurrency(key, f+".concurrency", s.Concurrency)
	}
	if s.RateLimit != nil {
		v.rateLimit(key, f+".rate_limit", s.RateLimit)
	}
	if p := s.Priority; p != nil && (*p < MinPriority || *p > MaxPriority) {
		v.add(key, f+".priority", "priority %d: must be %d to %d", *p, MinPriority, MaxPriority)
	}
	if s.QueueTimeout != nil {
		v.queueTimeout(key, f+".queue_timeout", *s.QueueTimeout)
	}
	if s.RunsOn != nil && len(s.RunsOn) == 0 {
		v.add(key, f+".runs_on", "runs_on is empty: list the tags a dispatcher needs, or leave it out")
	}
	for i, tag := range s.RunsOn {
		if !ValidTag(tag) {
			v.add(key, fmt.Sprintf("%s.runs_on[%d]", f, i), "tag %q must match %s", tag, reTag)
		}
	}
}
