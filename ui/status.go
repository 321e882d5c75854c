package ui

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/cairnrun/cairn/client"
)

// errView is an error value (a run's, a step's or an attempt's) as people read
// it: one line (the step it failed, its code, the first line of its message), the
// rest of the message as text with its line breaks, and the whole value as JSON
// for a toggle.
type errView struct {
	Step      string
	Code      string
	Message   string // its first line
	More      string // the lines after the first, if any
	Retryable bool   // said only while the step will still try again
	JSON      string
}

// Line is the one-line summary: "step x: code: message".
func (e *errView) Line() string {
	var parts []string
	if e.Step != "" {
		parts = append(parts, "step "+e.Step)
	}
	if e.Code != "" {
		parts = append(parts, e.Code)
	}
	if e.Message != "" {
		parts = append(parts, e.Message)
	}
	return strings.Join(parts, ": ")
}

// errorOf reads an error value: {"code", "message", "retryable"}, or a run's
// {"message": "step x failed", "step", "cause": {…}}, whose cause is what
// failed. Nil for a null value.
func errorOf(v any) *errView {
	if v == nil {
		return nil
	}
	e := &errView{JSON: pretty(v)}
	m, ok := v.(map[string]any)
	if !ok {
		e.Message = fmt.Sprint(v)
		return e
	}
	str := func(m map[string]any, k string) string { s, _ := m[k].(string); return s }
	// The handler's own code (docs/functions.md) says more than Cairn's
	// function_error.
	code := func(m map[string]any) string {
		if c := str(m, "handler_code"); c != "" {
			return c
		}
		return str(m, "code")
	}
	e.Step, e.Code = str(m, "step"), code(m)
	msg := str(m, "message")
	if cause, ok := m["cause"].(map[string]any); ok {
		// The run's own message ("step x failed") says less than its cause's.
		if c := code(cause); c != "" {
			e.Code = c
		}
		if cm := str(cause, "message"); cm != "" {
			msg = cm
		}
	}
	msg = strings.TrimSpace(msg)
	e.Message, e.More, _ = strings.Cut(msg, "\n")
	if len([]rune(e.Message)) > 240 {
		r := []rune(e.Message)
		e.More = string(r[240:]) + "\n" + e.More
		e.Message = string(r[:240]) + "…"
	}
	return e
}

// withRetry marks a step's error retryable when it says so and the step will try
// again (it is not finished and has attempts left).
func (e *errView) withRetry(v any, st client.Step) *errView {
	if e == nil {
		return nil
	}
	if m, ok := v.(map[string]any); ok {
		r, _ := m["retryable"].(bool)
		e.Retryable = r && !terminalStep(st.Status) && st.Attempts < st.MaxAttempts
	}
	return e
}

func terminalStep(s client.StepStatus) bool {
	switch s {
	case client.StepStatusSucceeded, client.StepStatusFailed, client.StepStatusCanceled, client.StepStatusSkipped:
		return true
	}
	return false
}

// runWhy says, in a few words, what an unfinished run waits for or is blocked by:
// "waiting: signal paid", "approval 1/2", "blocked: concurrency tenant (acme)
// 2/2", "paused (workflow)", "running: fetch". Kind is the row's visual state:
// waiting, blocked, paused or running.
type runWhy struct {
	Kind string
	Text string
}

// whyOf explains a run from its steps (nil steps: from the run alone).
func whyOf(run *client.Run, steps []client.Step) *runWhy {
	if run.Status == client.RunStatusPaused {
		t := "paused"
		if run.PauseReason != nil {
			t += " (" + string(*run.PauseReason) + ")"
		}
		return &runWhy{Kind: "paused", Text: t}
	}
	if run.Status.Terminal() {
		return nil
	}
	var running, waiting, blocked []string
	for _, st := range steps {
		switch {
		case st.Status == client.StepStatusRunning:
			running = append(running, st.Key)
		case st.Status == client.StepStatusSuspended && st.WaitingFor != nil:
			waiting = append(waiting, waitText(st))
		case st.BlockedBy != nil && st.BlockedBy.Kind != client.BlockedByKindPaused:
			blocked = append(blocked, blockedText(st.BlockedBy))
		}
	}
	list := func(xs []string) string {
		sort.Strings(xs)
		xs = compact(xs)
		if len(xs) > 2 {
			return strings.Join(xs[:2], ", ") + fmt.Sprintf(" and %d more", len(xs)-2)
		}
		return strings.Join(xs, ", ")
	}
	switch {
	case len(waiting) > 0 && len(running) == 0:
		return &runWhy{Kind: "waiting", Text: "waiting: " + list(waiting)}
	case len(blocked) > 0 && len(running) == 0:
		return &runWhy{Kind: "blocked", Text: "blocked: " + list(blocked)}
	case len(running) > 0:
		t := "running: " + list(running)
		if len(waiting) > 0 {
			t += "; waiting: " + list(waiting)
		}
		return &runWhy{Kind: "running", Text: t}
	case run.Status == client.RunStatusPending || len(steps) > 0:
		return &runWhy{Kind: "waiting", Text: "waiting for a worker"}
	}
	return nil
}

func compact(xs []string) []string {
	out := xs[:0]
	for i, x := range xs {
		if i == 0 || x != xs[i-1] {
			out = append(out, x)
		}
	}
	return out
}

// waitText is what a suspended step waits for, as the runs list says it.
func waitText(st client.Step) string {
	w := st.WaitingFor
	switch w.Kind {
	case client.WaitingForKindSignal:
		return "signal " + derefStr(w.Name)
	case client.WaitingForKindApproval:
		t := "approval"
		if w.Required != nil {
			t += fmt.Sprintf(" %d/%d", derefInt(w.Approvals), derefInt(w.Required))
		}
		return t + " (" + st.Key + ")"
	case client.WaitingForKindSleep:
		if w.Until != nil {
			return "sleep until " + fmtTime(w.Until)
		}
		return "sleep"
	case client.WaitingForKindChildRun:
		return "child run (" + st.Key + ")"
	case client.WaitingForKindEvent:
		return "event " + derefStr(w.Name)
	case client.WaitingForKindMap:
		if m := st.Map; m != nil {
			return fmt.Sprintf("map %s %s", st.Key, mapCount(m))
		}
		return "map " + st.Key
	}
	return string(w.Kind) + " (" + st.Key + ")"
}

// blockedText is what keeps a ready step from starting.
func blockedText(b *client.BlockedBy) string {
	t := string(b.Kind)
	if b.Kind == client.BlockedByKindConcurrency || b.Kind == client.BlockedByKindRateLimit || b.Kind == client.BlockedByKindQuota {
		t = strings.ReplaceAll(t, "_", " ")
		if b.Name != nil {
			t += " " + *b.Name
		}
		if b.Key != nil && *b.Key != "" && b.Kind == client.BlockedByKindQuota {
			t += " (namespace " + *b.Key + ")"
		} else if b.Key != nil && *b.Key != "" {
			t += " (" + *b.Key + ")"
		}
		if b.Limit != nil {
			t += fmt.Sprintf(" %d/%d", derefInt(b.InUse), *b.Limit)
		}
	} else if b.Kind == client.BlockedByKindNoDispatcher {
		t = "no dispatcher"
		if b.RunsOn != nil {
			t += " with " + strings.Join(*b.RunsOn, ",")
		}
	}
	return t
}

// mapCount is a map's progress as the CLI writes it: "17/20 ✓ 3 ✗".
func mapCount(m *client.MapProgress) string {
	total := fmt.Sprintf("%d+", m.Created)
	if m.Total != nil {
		total = fmt.Sprint(*m.Total)
	}
	t := fmt.Sprintf("%d/%s ✓", m.Succeeded, total)
	if m.Failed > 0 {
		t += fmt.Sprintf(" %d ✗", m.Failed)
	}
	return t
}

// runRow is a run of the runs list with what explains it.
type runRow struct {
	client.Run
	Why   *runWhy
	Err   *errView
	Steps string // "4 steps + 20 items", or the count alone
}

// listSteps is how many runs' steps the runs list reads at once.
const listSteps = 4

// rowsOf explains each run of a page: an unfinished run by its steps, a failed
// or canceled one by its error; and counts each run's steps and its maps' items
// apart. The steps are read listSteps runs at a time (a map's instances are not
// among them: a run of a large map reads few).
func rowsOf(r *http.Request, s *session, runs []client.Run) []runRow {
	rows := make([]runRow, len(runs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, listSteps)
	for i := range runs {
		rows[i] = runRow{Run: runs[i], Err: errorOf(runs[i].Error), Steps: plural(int(runs[i].StepsTotal), "step")}
		wg.Add(1)
		go func(row *runRow) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			id, err := parseUUID(row.Id)
			if err != nil {
				return
			}
			res, err := s.api.ListStepsWithResponse(r.Context(), id)
			if err != nil {
				row.Why = whyOf(&row.Run, nil)
				return
			}
			steps := deref(res.JSON200.Items)
			row.Why = whyOf(&row.Run, steps)
			row.Steps = stepCount(&row.Run, steps)
		}(&rows[i])
	}
	wg.Wait()
	return rows
}

// stepCount is a run's steps and its maps' items apart: "3 steps + 20 items"
// (a run's steps_total counts each map instance).
func stepCount(run *client.Run, steps []client.Step) string {
	var items int64
	for _, st := range steps {
		if st.Map != nil {
			items += st.Map.Created
		}
	}
	if items == 0 {
		return plural(int(run.StepsTotal), "step")
	}
	return plural(len(steps), "step") + " + " + plural(int(items), "item")
}

// nodeState is a DAG node's visual state: a suspended step shows what it waits
// for (waiting-signal, waiting-approval, …; a map's instances: working), a ready
// step kept back by a limit shows blocked.
func nodeState(st client.Step) string {
	switch {
	case st.Status == client.StepStatusSuspended && (st.Map != nil || st.WaitingFor != nil && st.WaitingFor.Kind == client.WaitingForKindMap):
		return "working"
	case st.Status == client.StepStatusSuspended && st.WaitingFor != nil:
		return "wait-" + strings.ReplaceAll(string(st.WaitingFor.Kind), "_", "-")
	case st.Status == client.StepStatusReady && st.BlockedBy != nil:
		return "blocked"
	}
	return ""
}

// jsonString is v as compact JSON.
func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// workflowNames are the workflows for the runs filter's choice (the first 1,000
// by name), with current among them even when no workflow has that name.
func workflowNames(r *http.Request, s *session, current string) []string {
	var names []string
	res, err := s.api.ListWorkflowsWithResponse(r.Context(), &client.ListWorkflowsParams{Limit: ptr(int64(1000))})
	if err == nil {
		for _, w := range deref(res.JSON200.Items) {
			names = append(names, w.Name)
		}
	}
	if current != "" && !slices.Contains(names, current) {
		names = append(names, current)
	}
	return names
}

// InputTime is a filter's time as a datetime-local input shows it (UTC, to the
// second); empty when it does not parse.
func (f runFilter) InputTime(v string) string {
	if v == "" {
		return ""
	}
	t, err := parseTime(v)
	if err != nil {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04:05")
}
