package testrun

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/cairnrun/cairn/catalog"
)

// Result is what became of one case.
type Result struct {
	Case string `json:"case"`
	File string `json:"file,omitempty"`
	// Err says why the case could not run (refused, or the embedded catalog
	// failed); Failures lists the expectations it missed.
	Err      error    `json:"-"`
	Failures []string `json:"failures,omitempty"`
	// Wall is the case's wall time; Virtual how far its clock went.
	Wall    time.Duration `json:"wall"`
	Virtual time.Duration `json:"virtual"`
	Run     *RunSummary   `json:"run,omitempty"`
	// Handlers are the steps whose real handler ran (the others were mocked,
	// or run no handler: waits, conditions' skips).
	Handlers []string `json:"handlers,omitempty"`
}

// Passed reports whether the case ran and met every expectation.
func (r *Result) Passed() bool { return r.Err == nil && len(r.Failures) == 0 }

// RunSummary is the end state of a case's run, as the catalog recorded it.
type RunSummary struct {
	ID        uuid.UUID     `json:"id"`
	Status    string        `json:"status"`
	ErrorCode string        `json:"error_code,omitempty"`
	Elapsed   time.Duration `json:"elapsed"`
	Steps     []StepSummary `json:"steps"`
}

// StepSummary is one step of a RunSummary.
type StepSummary struct {
	Key       string          `json:"key"`
	Status    string          `json:"status"`
	Reason    string          `json:"reason,omitempty"`
	ErrorCode string          `json:"error_code,omitempty"`
	Attempts  int             `json:"attempts"`
	Output    json.RawMessage `json:"output,omitempty"`
}

// Step returns the summary of step key; nil when the run has none.
func (s *RunSummary) Step(key string) *StepSummary {
	for i := range s.Steps {
		if s.Steps[i].Key == key {
			return &s.Steps[i]
		}
	}
	return nil
}

func errorCode(j catalog.JSON) string {
	var e struct {
		Code string `json:"code"`
	}
	if len(j) == 0 || json.Unmarshal(j, &e) != nil {
		return ""
	}
	return e.Code
}

// summarize reads the run's end state: its steps, and the map instances
// (KEY[i]) that instances names.
func summarize(ctx context.Context, store *catalog.Store, id uuid.UUID, instances []string) (*RunSummary, error) {
	run, err := store.RunGet(ctx, id)
	if err != nil {
		return nil, err
	}
	steps, err := store.StepList(ctx, id)
	if err != nil {
		return nil, err
	}
	s := &RunSummary{ID: id, Status: string(run.Status), ErrorCode: errorCode(run.Error)}
	if run.FinishedAt != nil {
		s.Elapsed = run.FinishedAt.Sub(run.CreatedAt)
	}
	for _, key := range instances {
		st, err := store.StepGet(ctx, id, key)
		if errors.Is(err, catalog.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		steps = append(steps, *st)
	}
	for _, st := range steps {
		ss := StepSummary{Key: st.Key, Status: string(st.Status), Attempts: st.Attempts, ErrorCode: errorCode(st.LastError)}
		if st.SkipReason != nil {
			ss.Reason = string(*st.SkipReason)
		}
		if st.Status == catalog.StepSucceeded && len(st.Output) > 0 {
			ss.Output = json.RawMessage(st.Output)
		}
		s.Steps = append(s.Steps, ss)
	}
	sort.Slice(s.Steps, func(i, j int) bool { return s.Steps[i].Key < s.Steps[j].Key })
	return s, nil
}

// instanceKeys returns the map instances (KEY[i]) a case's expectations name.
func instanceKeys(x Expect) []string {
	var out []string
	add := func(key string) {
		if strings.HasSuffix(key, "]") && strings.Contains(key, "[") && !slices.Contains(out, key) {
			out = append(out, key)
		}
	}
	for k := range x.Steps {
		add(k)
	}
	for _, k := range append(slices.Clone(x.Ran), x.NotRan...) {
		add(k)
	}
	sort.Strings(out)
	return out
}

// ran reports whether a step had an attempt, or ended by anything but a skip.
func (s StepSummary) ran() bool {
	return s.Attempts > 0 || s.Status == string(catalog.StepSucceeded) || s.Status == string(catalog.StepFailed)
}

// check compares a run with a case's expectations; each failure names the
// step or the path and says what was expected and what was found.
func check(c *Case, run *RunSummary) []string {
	var out []string
	x := c.Expect
	fail := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	if x.Status != "" && x.Status != run.Status {
		fail("run: expected status %s, got %s%s", x.Status, run.Status, codeSuffix(run.ErrorCode))
	}
	if x.ErrorCode != "" && x.ErrorCode != run.ErrorCode {
		fail("run: expected error code %s, got %q", x.ErrorCode, run.ErrorCode)
	}
	if x.Elapsed != nil && x.Elapsed.Std().Round(time.Second) != run.Elapsed.Round(time.Second) {
		fail("run: expected to take %s of virtual time, took %s", x.Elapsed, Duration(run.Elapsed.Round(time.Second)))
	}
	keys := make([]string, 0, len(x.Steps))
	for k := range x.Steps {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		want := x.Steps[k]
		got := run.Step(k)
		if got == nil {
			fail("step %s: expected it in the run, the run has no such step", k)
			continue
		}
		if want.Status != "" && want.Status != got.Status {
			fail("step %s: expected status %s, got %s%s%s", k, want.Status, got.Status, reasonSuffix(got.Reason), codeSuffix(got.ErrorCode))
		}
		if want.Reason != "" && want.Reason != got.Reason {
			fail("step %s: expected skip reason %s, got %q", k, want.Reason, got.Reason)
		}
		if want.ErrorCode != "" && want.ErrorCode != got.ErrorCode {
			fail("step %s: expected error code %s, got %q", k, want.ErrorCode, got.ErrorCode)
		}
		if want.Attempts != nil && *want.Attempts != got.Attempts {
			fail("step %s: expected %d attempts, got %d", k, *want.Attempts, got.Attempts)
		}
		if want.HasOutput {
			if msg := compare(want.Output, got.Output); msg != "" {
				fail("step %s: output: %s", k, msg)
			}
		}
	}
	paths := make([]string, 0, len(x.Outputs))
	for p := range x.Outputs {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		key, rest := splitPath(p)
		st := run.Step(key)
		if st == nil {
			fail("outputs.%s: the run has no step %s", p, key)
			continue
		}
		if st.Output == nil {
			fail("outputs.%s: step %s has no output (status %s)", p, key, st.Status)
			continue
		}
		v, err := lookup(st.Output, rest)
		if err != nil {
			fail("outputs.%s: %v", p, err)
			continue
		}
		if msg := compare(x.Outputs[p], v); msg != "" {
			fail("outputs.%s: %s", p, msg)
		}
	}
	for _, k := range x.Ran {
		if st := run.Step(k); st == nil || !st.ran() {
			status := "no such step"
			if st != nil {
				status = st.Status + reasonSuffix(st.Reason)
			}
			fail("step %s: expected it to run, it did not (%s)", k, status)
		}
	}
	for _, k := range x.NotRan {
		if st := run.Step(k); st != nil && st.ran() {
			fail("step %s: expected it not to run, it ran (%s, %d attempts)", k, st.Status, st.Attempts)
		}
	}
	return out
}

func codeSuffix(code string) string {
	if code == "" {
		return ""
	}
	return " (error code " + code + ")"
}

func reasonSuffix(r string) string {
	if r == "" {
		return ""
	}
	return " (" + r + ")"
}

// compare says how got (JSON) differs from want (a YAML value); "" when equal.
func compare(want any, got json.RawMessage) string {
	wb, err := json.Marshal(jsonValue(want))
	if err != nil {
		return err.Error()
	}
	var w, g any
	_ = json.Unmarshal(wb, &w)
	if len(got) == 0 {
		got = json.RawMessage("null")
	}
	if err := json.Unmarshal(got, &g); err != nil {
		return fmt.Sprintf("not JSON: %v", err)
	}
	if reflect.DeepEqual(w, g) {
		return ""
	}
	return fmt.Sprintf("expected %s, got %s", wb, compact(got))
}

func compact(b []byte) string {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return string(b)
	}
	if buf.Len() > 200 {
		return buf.String()[:200] + "…"
	}
	return buf.String()
}

// splitPath splits "step.a[0].b" (or "$.step.a") into the step key and the rest.
func splitPath(p string) (key, rest string) {
	p = strings.TrimPrefix(strings.TrimPrefix(p, "$"), ".")
	i := strings.IndexAny(p, ".[")
	if i < 0 {
		return p, ""
	}
	return p[:i], p[i:]
}

// lookup follows a JSONPath-like path (.field, [index], ["field"]) into doc.
func lookup(doc json.RawMessage, path string) (json.RawMessage, error) {
	cur := doc
	seen := ""
	for path != "" {
		var field string
		index := -1
		switch {
		case strings.HasPrefix(path, "."):
			path = path[1:]
			i := strings.IndexAny(path, ".[")
			if i < 0 {
				i = len(path)
			}
			field, path = path[:i], path[i:]
		case strings.HasPrefix(path, `["`):
			end := strings.Index(path, `"]`)
			if end < 0 {
				return nil, fmt.Errorf("unclosed [\" in the path")
			}
			field, path = path[2:end], path[end+2:]
		case strings.HasPrefix(path, "["):
			end := strings.IndexByte(path, ']')
			if end < 0 {
				return nil, fmt.Errorf("unclosed [ in the path")
			}
			n, err := strconv.Atoi(path[1:end])
			if err != nil {
				return nil, fmt.Errorf("index %q is not a number", path[1:end])
			}
			index, path = n, path[end+1:]
		default:
			return nil, fmt.Errorf("cannot read the path at %q", path)
		}
		if index >= 0 {
			var list []json.RawMessage
			if json.Unmarshal(cur, &list) != nil {
				return nil, fmt.Errorf("%s is not a list", orRoot(seen))
			}
			if index >= len(list) {
				return nil, fmt.Errorf("%s has %d items, no index %d", orRoot(seen), len(list), index)
			}
			cur, seen = list[index], fmt.Sprintf("%s[%d]", seen, index)
			continue
		}
		var obj map[string]json.RawMessage
		if json.Unmarshal(cur, &obj) != nil {
			return nil, fmt.Errorf("%s is not an object", orRoot(seen))
		}
		v, ok := obj[field]
		if !ok {
			return nil, fmt.Errorf("%s has no field %q", orRoot(seen), field)
		}
		cur, seen = v, seen+"."+field
	}
	return cur, nil
}

func orRoot(p string) string {
	if p == "" {
		return "the output"
	}
	return strings.TrimPrefix(p, ".")
}
