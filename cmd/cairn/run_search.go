package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/cairnrun/cairn/client"
)

// runFilterFlags are the filters of cairn run list, as GET /v1/runs takes them.
type runFilterFlags struct {
	workflow, status string
	labels           []string
	version          int64
	since, until     string
	errorCode        string
	parent           string
}

func (f *runFilterFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.workflow, "workflow", "", "only runs of this workflow")
	fs.StringVar(&f.status, "status", "", "only runs in this state: pending, running, paused, succeeded, failed or canceled")
	fs.StringArrayVarP(&f.labels, "label", "l", nil, "only runs with this label, key=value (repeat: all must match)")
	fs.Int64Var(&f.version, "version", 0, "only runs of this version (needs --workflow)")
	fs.StringVar(&f.since, "since", "", "only runs created since: a duration back from now (24h) or an RFC 3339 time")
	fs.StringVar(&f.until, "until", "", "only runs created before: a duration back from now (1h) or an RFC 3339 time")
	fs.StringVar(&f.errorCode, "error-code", "", "only failed runs whose error has this code (error.cause.code)")
	fs.StringVar(&f.parent, "parent", "", "only runs started by this run")
}

// params turns the flags into the list's query; now is what durations count back
// from.
func (f *runFilterFlags) params(now time.Time) (*client.ListRunsParams, error) {
	p := &client.ListRunsParams{}
	if f.workflow != "" {
		p.Workflow = &f.workflow
	}
	if f.status != "" {
		st := client.ListRunsParamsStatus(f.status)
		if !st.Valid() {
			return nil, fmt.Errorf("unknown run status %q (want pending, running, paused, succeeded, failed or canceled)", f.status)
		}
		p.Status = &st
	}
	if len(f.labels) > 0 {
		if _, err := parseLabels(f.labels); err != nil {
			return nil, err
		}
		p.Label = &f.labels
	}
	if f.version != 0 {
		if f.workflow == "" {
			return nil, fmt.Errorf("--version needs --workflow: versions are numbered per workflow")
		}
		p.Version = &f.version
	}
	for _, t := range []struct {
		flag, value string
		into        **time.Time
	}{{"since", f.since, &p.CreatedAfter}, {"until", f.until, &p.CreatedBefore}} {
		if t.value == "" {
			continue
		}
		at, err := parseSince(t.value, now)
		if err != nil {
			return nil, fmt.Errorf("--%s: %w", t.flag, err)
		}
		*t.into = &at
	}
	if f.errorCode != "" {
		p.ErrorCode = &f.errorCode
	}
	if f.parent != "" {
		id, err := parseRunID(f.parent)
		if err != nil {
			return nil, fmt.Errorf("--parent: %w", err)
		}
		p.Parent = &id
	}
	return p, nil
}

// parseSince reads a time: a Go duration back from now ("24h", "90m") or an RFC
// 3339 time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("%q: a duration back from now is positive", s)
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither a duration (24h, 90m) nor an RFC 3339 time (2025-03-01T12:00:00Z)", s)
	}
	return t, nil
}

// parseLabels reads key=value pairs (split at the first '='). The server checks the
// keys and values; a key given twice is an error here.
func parseLabels(pairs []string) (map[string]string, error) {
	out := make(map[string]string, len(pairs))
	for _, kv := range pairs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("label %q: want key=value", kv)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("label %s given twice", k)
		}
		out[k] = v
	}
	return out, nil
}

// formatLabels writes labels as k=v pairs, sorted by key, comma-separated.
func formatLabels(labels map[string]string) string {
	parts := make([]string, 0, len(labels))
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		parts = append(parts, k+"="+labels[k])
	}
	return strings.Join(parts, ",")
}
