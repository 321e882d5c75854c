package bundle

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Retention says how long the finished runs of a workflow are kept (cairn.yaml
// retention:): a run is deleted, with its steps, attempts, events, signals and
// approvals, once it has been finished for longer than the duration of its status.
// An unset status falls back to the server's default (cairn serve --retention),
// "forever" keeps the runs of that status.
type Retention struct {
	// Succeeded, Failed and Canceled are the retention of the runs that ended so.
	Succeeded *RetentionPeriod `yaml:"succeeded,omitempty" json:"succeeded,omitempty"`
	Failed    *RetentionPeriod `yaml:"failed,omitempty" json:"failed,omitempty"`
	Canceled  *RetentionPeriod `yaml:"canceled,omitempty" json:"canceled,omitempty"`
	// Archive writes a run (run, steps, attempts, events, as JSON Lines) to the
	// blob store before it is deleted. Unset: the server's setting.
	Archive *bool `yaml:"archive,omitempty" json:"archive,omitempty"`
}

// Bounds of a retention period: at least a minute (a run must be readable
// after it ends), at most ten years.
const (
	MinRetention = time.Minute
	MaxRetention = 10 * 365 * 24 * time.Hour
)

// RetentionPeriod is a duration with a day unit ("7d", "36h", "90m", "1d12h") or
// "forever" (Forever). The zero value is not valid.
type RetentionPeriod struct {
	D       time.Duration
	Forever bool
}

// ParseRetentionPeriod parses "forever", "Nd" (N days) followed by an optional
// Go duration ("1d12h"), or a Go duration alone ("36h").
func ParseRetentionPeriod(s string) (RetentionPeriod, error) {
	if s == "forever" {
		return RetentionPeriod{Forever: true}, nil
	}
	var d time.Duration
	rest := s
	if i := strings.IndexByte(rest, 'd'); i > 0 {
		n, err := strconv.Atoi(rest[:i])
		if err != nil || n < 0 || n > 100000 {
			return RetentionPeriod{}, fmt.Errorf("invalid retention %q: use a number of days (7d), a duration (36h) or forever", s)
		}
		d = time.Duration(n) * 24 * time.Hour
		rest = rest[i+1:]
	}
	if rest != "" {
		v, err := time.ParseDuration(rest)
		if err != nil {
			return RetentionPeriod{}, fmt.Errorf("invalid retention %q: use a number of days (7d), a duration (36h) or forever", s)
		}
		d += v
	}
	return RetentionPeriod{D: d}, nil
}

// String is the canonical form: "forever", or days and the rest ("7d", "1d12h0m0s").
func (p RetentionPeriod) String() string {
	if p.Forever {
		return "forever"
	}
	days := p.D / (24 * time.Hour)
	rest := p.D % (24 * time.Hour)
	switch {
	case days == 0:
		return rest.String()
	case rest == 0:
		return fmt.Sprintf("%dd", days)
	default:
		return fmt.Sprintf("%dd%s", days, rest)
	}
}

// Seconds is the period in seconds, -1 for forever: what the catalog stores.
func (p RetentionPeriod) Seconds() int64 {
	if p.Forever {
		return -1
	}
	return int64(p.D / time.Second)
}

// UnmarshalYAML parses the period. Errors name the line.
func (p *RetentionPeriod) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: invalid retention: must be a string like \"7d\"", n.Line)}}
	}
	v, err := ParseRetentionPeriod(n.Value)
	if err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", n.Line, err)}}
	}
	*p = v
	return nil
}

// MarshalYAML returns the canonical string.
func (p RetentionPeriod) MarshalYAML() (any, error) { return p.String(), nil }

// MarshalJSON returns the canonical string, quoted.
func (p RetentionPeriod) MarshalJSON() ([]byte, error) { return json.Marshal(p.String()) }

// UnmarshalJSON parses a quoted period.
func (p *RetentionPeriod) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("retention: %w", err)
	}
	v, err := ParseRetentionPeriod(s)
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// RetentionDefinition is a Retention normalized: the periods in seconds beside
// their canonical strings (-1: forever; absent: the server's default). The
// catalog reads the seconds (catalog/retention.go).
type RetentionDefinition struct {
	Succeeded  *RetentionPeriod `json:"succeeded,omitempty"`
	SucceededS *int64           `json:"succeeded_s,omitempty"`
	Failed     *RetentionPeriod `json:"failed,omitempty"`
	FailedS    *int64           `json:"failed_s,omitempty"`
	Canceled   *RetentionPeriod `json:"canceled,omitempty"`
	CanceledS  *int64           `json:"canceled_s,omitempty"`
	Archive    *bool            `json:"archive,omitempty"`
}

func normalizeRetention(r *Retention) *RetentionDefinition {
	if r == nil || (r.Succeeded == nil && r.Failed == nil && r.Canceled == nil && r.Archive == nil) {
		return nil
	}
	d := &RetentionDefinition{Succeeded: r.Succeeded, Failed: r.Failed, Canceled: r.Canceled, Archive: r.Archive}
	secs := func(p *RetentionPeriod) *int64 {
		if p == nil {
			return nil
		}
		s := p.Seconds()
		return &s
	}
	d.SucceededS, d.FailedS, d.CanceledS = secs(r.Succeeded), secs(r.Failed), secs(r.Canceled)
	return d
}

// retention checks the manifest's retention periods.
func (v *validator) retention(r *Retention) {
	if r == nil {
		return
	}
	for _, f := range []struct {
		name string
		p    *RetentionPeriod
	}{{"succeeded", r.Succeeded}, {"failed", r.Failed}, {"canceled", r.Canceled}} {
		if f.p == nil || f.p.Forever {
			continue
		}
		if f.p.D < MinRetention || f.p.D > MaxRetention {
			v.add("", "retention."+f.name, "retention %s: must be at least %s and at most %s (ten years), or forever",
				f.p, MinRetention, RetentionPeriod{D: MaxRetention})
		}
	}
}
