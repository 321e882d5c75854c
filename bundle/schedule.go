package bundle

import (
	"fmt"
	"regexp"
	"time"
	// The IANA time zone database inside the binary, so that a schedule's timezone
	// resolves on machines without /usr/share/zoneinfo (minimal images).
	_ "time/tzdata"

	"github.com/robfig/cron/v3"
)

// Schedule is one entry of the manifest's schedules: a cron expression that starts a
// run of the workflow's latest version at every fire time (docs/schedules.md).
type Schedule struct {
	// Name identifies the schedule in its workflow: ^[a-z0-9][a-z0-9_-]{0,62}$, unique
	// among the workflow's schedules.
	Name string `yaml:"name" json:"name"`
	// Cron is the fire times: standard five fields (minute hour day-of-month month
	// day-of-week), an optional leading seconds field (six fields), or a descriptor
	// (@yearly, @monthly, @weekly, @daily, @hourly, @every <duration>).
	Cron string `yaml:"cron" json:"cron"`
	// Timezone is the IANA time zone the cron fields are read in; default UTC.
	Timezone string `yaml:"timezone,omitempty" json:"timezone,omitempty"`
	// Input is the input of every run the schedule creates (any JSON value); none
	// when unset.
	Input any `yaml:"input,omitempty" json:"input,omitempty"`
	// Overlap is what a fire does while the schedule's previous run is unfinished:
	// skip (default), allow, buffer_one or cancel_other (see Overlap).
	Overlap Overlap `yaml:"overlap,omitempty" json:"overlap,omitempty"`
	// Catchup is how far back fires missed while no server ran are still created
	// (each once); older ones are skipped. Default 0: none are.
	Catchup *Duration `yaml:"catchup,omitempty" json:"catchup,omitempty"`
}

// Overlap is a schedule's policy for a fire while its previous run is unfinished.
type Overlap string

// The overlap policies.
const (
	// OverlapSkip creates nothing for the fire; the skip is recorded on the schedule.
	OverlapSkip Overlap = "skip"
	// OverlapAllow creates the run anyway.
	OverlapAllow Overlap = "allow"
	// OverlapBufferOne keeps at most one fire waiting: it is created when the
	// unfinished run ends; further fires meanwhile are skipped.
	OverlapBufferOne Overlap = "buffer_one"
	// OverlapCancelOther cancels the unfinished run and creates the new one.
	OverlapCancelOther Overlap = "cancel_other"
)

// Overlaps are the valid overlap policies.
var Overlaps = []Overlap{OverlapSkip, OverlapAllow, OverlapBufferOne, OverlapCancelOther}

// Schedule limits.
const (
	// MaxSchedules bounds the number of schedules of one workflow.
	MaxSchedules = 64
	// MaxCatchup bounds a schedule's catchup window.
	MaxCatchup = 366 * 24 * time.Hour
)

// ScheduleDefinition is a normalized schedule: every field filled in.
type ScheduleDefinition struct {
	Name string `json:"name"`
	// Cron as written (trimmed); ParseCron reads it.
	Cron string `json:"cron"`
	// Timezone is an IANA name; "UTC" by default.
	Timezone string `json:"timezone"`
	// Input is the runs' input as a JSON value; nil for none.
	Input any `json:"input"`
	// Overlap is one of Overlaps.
	Overlap Overlap `json:"overlap"`
	// Catchup, and the same in milliseconds.
	Catchup   Duration `json:"catchup"`
	CatchupMS int64    `json:"catchup_ms"`
}

var reScheduleName = reKey

// cronParser reads standard five-field expressions, six with a leading seconds field,
// and descriptors.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseCron parses a schedule's cron expression (see Schedule.Cron) read in the time
// zone loc. It is safe for concurrent use. A "TZ=" or "CRON_TZ=" prefix is refused:
// the time zone is the schedule's timezone field.
func ParseCron(expr string, loc *time.Location) (cron.Schedule, error) {
	if reCronTZ.MatchString(expr) {
		return nil, fmt.Errorf("a time zone prefix is not allowed: use the timezone field")
	}
	s, err := cronParser.Parse(expr)
	if err != nil {
		return nil, err
	}
	if loc == nil {
		loc = time.UTC
	}
	switch x := s.(type) {
	case *cron.SpecSchedule:
		x.Location = loc
	case cron.ConstantDelaySchedule:
		// @every: the same delay in any time zone.
	}
	return s, nil
}

var reCronTZ = regexp.MustCompile(`^\s*(CRON_)?TZ=`)

// NextFire returns the first fire time of sched strictly after t, in UTC, and false
// when there is none (a cron that never matches, such as "0 0 30 2 *"). Fire times
// follow the cron fields in the schedule's time zone (robfig/cron's rules): every
// instant whose wall time there matches fires. So on a daylight-saving change a wall
// time that does not exist that day (02:30 on a spring-forward day in Europe/Paris)
// does not fire, and one that exists twice (02:30 on a fall-back day) fires at both
// instants; an hourly schedule fires every real hour (23 fires on a spring-forward
// day, 25 on a fall-back day).
func NextFire(sched cron.Schedule, t time.Time) (time.Time, bool) {
	n := sched.Next(t)
	if n.IsZero() {
		return time.Time{}, false
	}
	return n.UTC(), true
}

// schedules checks the manifest's schedules.
func (v *validator) schedules(list []Schedule) {
	if len(list) > MaxSchedules {
		v.add("", "schedules", "%d schedules, over the limit of %d per workflow", len(list), MaxSchedules)
		return
	}
	seen := make(map[string]int, len(list))
	for i, s := range list {
		f := fmt.Sprintf("schedules[%d]", i)
		switch {
		case s.Name == "":
			v.add("", f+".name", "required")
		case !reScheduleName.MatchString(s.Name):
			v.add("", f+".name", "%q must be 1 to 63 lower-case letters, digits, '_' and '-', starting with a letter or digit", s.Name)
		default:
			if j, dup := seen[s.Name]; dup {
				v.add("", f+".name", "duplicate schedule name %q (first used by schedules[%d])", s.Name, j)
			} else {
				seen[s.Name] = i
			}
		}
		loc := time.UTC
		if s.Timezone != "" {
			l, err := time.LoadLocation(s.Timezone)
			if err != nil || s.Timezone == "Local" {
				v.add("", f+".timezone", "schedule %q: unknown time zone %q: use an IANA name such as \"Europe/Paris\"", s.Name, s.Timezone)
			} else {
				loc = l
			}
		}
		if s.Cron == "" {
			v.add("", f+".cron", "schedule %q: required", s.Name)
		} else if sched, err := ParseCron(s.Cron, loc); err != nil {
			v.add("", f+".cron", "schedule %q: invalid cron %q: %v", s.Name, s.Cron, err)
		} else if _, ok := NextFire(sched, time.Now()); !ok {
			v.add("", f+".cron", "schedule %q: cron %q never fires", s.Name, s.Cron)
		}
		if s.Overlap != "" && !validOverlap(s.Overlap) {
			v.add("", f+".overlap", "schedule %q: unknown overlap %q: use skip, allow, buffer_one or cancel_other", s.Name, s.Overlap)
		}
		if s.Catchup != nil && (*s.Catchup < 0 || s.Catchup.Std() > MaxCatchup) {
			v.add("", f+".catchup", "schedule %q: catchup %s must be between 0 and %s", s.Name, s.Catchup, Duration(MaxCatchup))
		}
		if _, err := normalizeValue(s.Input, "", 0); err != nil {
			v.add("", f+".input"+err.at, "schedule %q: %s", s.Name, err.msg)
		}
	}
}

func validOverlap(o Overlap) bool {
	for _, x := range Overlaps {
		if o == x {
			return true
		}
	}
	return false
}

// normalizeSchedules returns the definitions of valid schedules, in manifest order;
// nil when there are none (so that a manifest without schedules keeps its
// fingerprint).
func normalizeSchedules(list []Schedule) []ScheduleDefinition {
	if len(list) == 0 {
		return nil
	}
	out := make([]ScheduleDefinition, 0, len(list))
	for _, s := range list {
		d := ScheduleDefinition{Name: s.Name, Cron: s.Cron, Timezone: s.Timezone, Overlap: s.Overlap}
		if d.Timezone == "" {
			d.Timezone = "UTC"
		}
		if d.Overlap == "" {
			d.Overlap = OverlapSkip
		}
		if s.Catchup != nil {
			d.Catchup = *s.Catchup
		}
		d.CatchupMS = d.Catchup.Std().Milliseconds()
		d.Input, _ = normalizeValue(s.Input, "", 0) // validated
		out = append(out, d)
	}
	return out
}
