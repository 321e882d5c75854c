package bundle

import (
	"cmp"
	"regexp"
	"strings"
	"time"

	"github.com/cairnrun/cairn/expr"
)

// MaxConcurrencyLimit bounds concurrency.limit (and a limit set at run time).
const MaxConcurrencyLimit = 100_000

// reLimitName is the syntax of a concurrency limit's name (a workflow name fits it).
var reLimitName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

// ValidLimitName reports whether name is a valid concurrency limit name.
func ValidLimitName(name string) bool { return reLimitName.MatchString(name) }

// ConcurrencySpec is a step's concurrency limit as written (docs/flow.md): at most Limit
// attempts of the steps with the same Name and key run at once, across all
// dispatchers.
type ConcurrencySpec struct {
	// Name of the limit; default the workflow's name. Steps of several workflows
	// share a limit by naming it alike.
	Name string `yaml:"name,omitempty" json:"name,omitempty"`
	// Key is a CEL expression (input, params, labels, run) evaluated once, when the
	// run's steps are created; its value (a string as is, any other value as JSON)
	// picks the slots. Empty: one key for the whole limit.
	Key string `yaml:"key,omitempty" json:"key,omitempty"`
	// Limit is the number of slots per key: 1..MaxConcurrencyLimit. PUT
	// /v1/limits/{name} overrides it at run time.
	Limit int `yaml:"limit" json:"limit"`
}

// ConcurrencyDefinition is an effective concurrency limit: the name filled in.
type ConcurrencyDefinition struct {
	Name  string `json:"name"`
	Key   string `json:"key,omitempty"`
	Limit int    `json:"limit"`
}

// concurrency validates a concurrency spec at field f of step key.
func (v *validator) concurrency(key, f string, c *ConcurrencySpec) {
	if c.Name != "" && !reLimitName.MatchString(c.Name) {
		v.add(key, f+".name", "limit name %q must match %s", c.Name, reLimitName)
	}
	if c.Limit < 1 || c.Limit > MaxConcurrencyLimit {
		v.add(key, f+".limit", "limit %d: must be 1 to %d", c.Limit, MaxConcurrencyLimit)
	}
	if c.Key != "" {
		if err := expr.CreateEnv.Check(c.Key); err != nil {
			v.add(key, f+".key", "bad expression: %v", err)
		}
	}
}

// effectiveConcurrency is the step's concurrency, else the defaults', with the name
// defaulting to the workflow's; nil when neither sets one.
func effectiveConcurrency(step, defaults *ConcurrencySpec, workflow string) *ConcurrencyDefinition {
	c := step
	if c == nil {
		c = defaults
	}
	if c == nil {
		return nil
	}
	d := &ConcurrencyDefinition{Name: c.Name, Key: c.Key, Limit: c.Limit}
	if d.Name == "" {
		d.Name = workflow
	}
	return d
}

// MaxRatePer bounds rate_limit.per: a day.
const MaxRatePer = 24 * time.Hour

// RateLimitSpec is a step's rate limit as written (docs/flow.md): at most Limit attempts
// of the steps with the same Name and key start per Per, across all dispatchers (a
// token bucket of Limit tokens, refilled evenly over Per).
type RateLimitSpec struct {
	// Name of the limit; default the workflow's name.
	Name string `yaml:"name,omitempty" json:"name,omitempty"`
	// Key is a CEL expression as ConcurrencySpec.Key; empty: one bucket.
	Key string `yaml:"key,omitempty" json:"key,omitempty"`
	// Limit is the number of starts per Per: 1..MaxConcurrencyLimit.
	Limit int `yaml:"limit" json:"limit"`
	// Per is the window: > 0 and at most a day.
	Per Duration `yaml:"per" json:"per"`
}

// RateLimitDefinition is an effective rate limit: the name filled in, the window
// also in milliseconds.
type RateLimitDefinition struct {
	Name  string   `json:"name"`
	Key   string   `json:"key,omitempty"`
	Limit int      `json:"limit"`
	Per   Duration `json:"per"`
	PerMS int64    `json:"per_ms"`
}

// rateLimit validates a rate limit spec at field f of step key.
func (v *validator) rateLimit(key, f string, r *RateLimitSpec) {
	if r.Name != "" && !reLimitName.MatchString(r.Name) {
		v.add(key, f+".name", "limit name %q must match %s", r.Name, reLimitName)
	}
	if r.Limit < 1 || r.Limit > MaxConcurrencyLimit {
		v.add(key, f+".limit", "limit %d: must be 1 to %d", r.Limit, MaxConcurrencyLimit)
	}
	if d := r.Per.Std(); d < time.Millisecond || d > MaxRatePer {
		v.add(key, f+".per", "per %s: must be at least 1ms and at most %s", r.Per, Duration(MaxRatePer))
	}
	if r.Key != "" {
		if err := expr.CreateEnv.Check(r.Key); err != nil {
			v.add(key, f+".key", "bad expression: %v", err)
		}
	}
}

// effectiveRateLimit is the step's rate limit, else the defaults'; nil when neither
// sets one.
func effectiveRateLimit(step, defaults *RateLimitSpec, workflow string) *RateLimitDefinition {
	r := step
	if r == nil {
		r = defaults
	}
	if r == nil {
		return nil
	}
	d := &RateLimitDefinition{Name: r.Name, Key: r.Key, Limit: r.Limit, Per: r.Per, PerMS: r.Per.Std().Milliseconds()}
	if d.Name == "" {
		d.Name = workflow
	}
	return d
}

// Step priorities: 0..9, higher first; DefaultPriority when none is set.
const (
	MinPriority     = 0
	MaxPriority     = 9
	DefaultPriority = 5
)

// cmpOrPtr returns a copy of the first non-nil of ps; nil when all are.
func cmpOrPtr(ps ...*int) *int {
	for _, p := range ps {
		if p != nil {
			v := *p
			return &v
		}
	}
	return nil
}

// reTag is the syntax of a dispatcher tag (runs_on, cairn serve --tags).
var reTag = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

// ValidTag reports whether tag is a valid dispatcher tag.
func ValidTag(tag string) bool { return reTag.MatchString(tag) }

// TagRule says what a tag is, for the messages that refuse one.
const TagRule = "1 to 63 of a-z, 0-9, '_', '.', '-', starting with a letter or digit"

// ParseTags splits a comma-separated list of tags ("gpu, cuda"), leaving out empty
// entries; bad is the first entry that is not a tag (tags is nil then).
func ParseTags(list string) (tags []string, bad string) {
	for _, tag := range strings.Split(list, ",") {
		if tag = strings.TrimSpace(tag); tag == "" {
			continue
		}
		if !ValidTag(tag) {
			return nil, tag
		}
		tags = append(tags, tag)
	}
	return tags, ""
}

// normalizeTags returns tags sorted and duplicate-free; nil for none.
func normalizeTags(tags []string) []string {
	if len(tags) == 0 {
		return nil
	}
	return dedupe(tags)
}

// queueTimeout validates a queue_timeout: > 0 and at most a year (MaxSleep).
func (v *validator) queueTimeout(key, f string, d Duration) {
	if d.Std() <= 0 || d.Std() > MaxSleep {
		v.add(key, f, "queue_timeout %s: must be > 0 and at most %s (a year)", d, Duration(MaxSleep))
	}
}

// flowDefaults are the manifest's defaults of the flow settings, and its name (the
// default limit name).
type flowDefaults struct {
	conc     *ConcurrencySpec
	rate     *RateLimitSpec
	priority *int
	queue    *Duration
	workflow string
}

// apply gives d, the definition of s (a step, a compensation or an on_failure
// step), its effective flow settings: its own, else the defaults.
func (fd flowDefaults) apply(d *StepDefinition, s *Step) {
	d.Concurrency = effectiveConcurrency(s.Concurrency, fd.conc, fd.workflow)
	d.RateLimit = effectiveRateLimit(s.RateLimit, fd.rate, fd.workflow)
	d.Priority = cmpOrPtr(s.Priority, fd.priority)
	d.RunsOn = normalizeTags(s.RunsOn)
	if q := cmp.Or(s.QueueTimeout, fd.queue); q != nil {
		v := *q
		d.QueueTimeout, d.QueueTimeoutMS = &v, v.Std().Milliseconds()
	}
}
