package ui

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	openapi_types "github.com/oapi-codegen/runtime/types"

	"github.com/cairnrun/cairn/client"
)

// runView is the run page's data.
type runView struct {
	Title    string
	Run      *client.Run
	Steps    []client.Step
	Graph    *graph
	Timeline any
	Input    string
	Terminal bool
	// Why is what the unfinished run waits for or is blocked by; Err its error.
	Why *runWhy
	Err *errView
	// Count is its steps and its maps' items apart; Took how long it ran.
	Count, Took string
	// Panel is the open step's panel (?step=KEY).
	Panel         any
	PanelKey      string
	TimelineDrawn bool
	Elapsed       string
	// Signals are the signal names its version's steps wait for, those the run
	// waits for now first (Waiting).
	Signals []string
	Waiting map[string]bool
	History *historyView
	Tries   []tryView
}

// PageTitle names the run: its short ID, workflow and status.
func (v *runView) PageTitle() string { return v.Title }

// runPage shows a run. An ID that is no UUID is looked up as a short ID: one run
// has it, its page; none or several, a page that says so.
func (h *Handler) runPage(w http.ResponseWriter, r *http.Request, s *session) {
	id, ok := runID(r)
	if !ok {
		h.lookup(w, r, s, r.PathValue("id"), r.URL.RawQuery)
		return
	}
	ctx := r.Context()
	start := time.Now()
	// The steps first, then the run, as runState does: the page then never shows a
	// step running in a run still pending.
	steps, err := s.api.ListStepsWithResponse(ctx, id)
	if err != nil {
		h.notFoundRun(w, r, s, id.String(), err)
		return
	}
	run, err := s.api.GetRunWithResponse(ctx, id)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	items := deref(steps.JSON200.Items)
	rn := run.JSON200
	v := &runView{
		Title: fmt.Sprintf("Run %s of %s (%s)", shortID(rn.Id), rn.Workflow, rn.Status),
		Run:   rn, Steps: items, Graph: layout(items), Timeline: h.fragment("timeline", s, timelineOf(r, s, id, items)),
		Input: pretty(rn.Input), Terminal: rn.Status.Terminal(), Why: whyOf(rn, items), Err: errorOf(rn.Error),
		Count: stepCount(rn, items), Took: duration(rn.StartedAt, rn.FinishedAt),
	}
	if key := r.URL.Query().Get("step"); key != "" {
		if p, err := h.panel(r, s, id, key); err == nil {
			v.Panel, v.PanelKey = h.fragment("step", s, p), key
		}
	}
	if !v.Terminal && s.canOperate() {
		v.Signals, v.Waiting = h.signalNames(r, s, rn, items)
	}
	v.History = historyOf(r, s, id)
	v.Tries = triesOf(r, s, id)
	// A run of more steps than the timeline draws is not fetched again either.
	v.TimelineDrawn = len(items) <= timelineMax
	v.Elapsed = time.Since(start).Round(time.Millisecond).String()
	h.render(w, r, s, "run", v)
}

// notFoundRun answers a run the API does not know with a page that says so.
func (h *Handler) notFoundRun(w http.ResponseWriter, r *http.Request, s *session, id string, err error) {
	if status, _ := problemText(err); status == http.StatusNotFound {
		h.renderStatus(w, r, s, "error", http.StatusNotFound, map[string]any{"Status": 404, "Title": "No run " + id,
			"Message": "No run has the ID " + id + ": check it, or search for the run by its workflow or a label."})
		return
	}
	h.fail(w, r, s, err)
}

// lookup resolves a short ID (the last 12 hex digits the UI shows, or the first
// ones): one run, its page (with the rest of the URL's query); none or several, a
// page that says so.
func (h *Handler) lookup(w http.ResponseWriter, r *http.Request, s *session, short, query string) {
	res, err := s.api.LookupRunsWithResponse(r.Context(), &client.LookupRunsParams{Id: short})
	if err != nil {
		if status, _ := problemText(err); status == http.StatusBadRequest || status == 422 {
			h.notFoundRun(w, r, s, short, &client.Problem{Status: 404})
			return
		}
		h.fail(w, r, s, err)
		return
	}
	runs := deref(res.JSON200.Items)
	switch len(runs) {
	case 0:
		h.notFoundRun(w, r, s, short, &client.Problem{Status: 404})
	case 1:
		next := "/ui/runs/" + runs[0].Id
		if query != "" {
			next += "?" + query
		}
		http.Redirect(w, r, next, http.StatusSeeOther)
	default:
		h.render(w, r, s, "runs", map[string]any{"Title": "Runs with the ID " + short, "Items": rowsOf(r, s, runs),
			"Filter": runFilter{}, "Statuses": runStatuses, "Error": "Several runs have an ID that " + short + " names: give more of it."})
	}
}

// signalNames are the names of the signals the run's version waits for (its
// signal steps), and which of them a step waits for now.
func (h *Handler) signalNames(r *http.Request, s *session, run *client.Run, steps []client.Step) ([]string, map[string]bool) {
	waiting := map[string]bool{}
	var names []string
	for _, st := range steps {
		if st.Status == client.StepStatusSuspended && st.WaitingFor != nil && st.WaitingFor.Kind == client.WaitingForKindSignal && st.WaitingFor.Name != nil {
			waiting[*st.WaitingFor.Name] = true
			names = append(names, *st.WaitingFor.Name)
		}
	}
	if def := h.definition(r, s, run); def != nil {
		for _, st := range def.Steps {
			if st.Signal != nil && st.Signal.Name != "" {
				names = append(names, st.Signal.Name)
			}
		}
	}
	// Those waited for first, then the others, each once.
	slices.SortStableFunc(names, func(a, b string) int {
		if waiting[a] != waiting[b] {
			if waiting[a] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	return slices.Compact(names), waiting
}

// definition is what the UI reads of a run's version's definition: its steps'
// keys, approvals, signals and event waits. Nil when it cannot be read.
type definition struct {
	Steps []struct {
		Key      string `json:"key"`
		Approval *struct {
			Roles []string `json:"roles"`
		} `json:"approval"`
		Signal *struct {
			Name string `json:"name"`
		} `json:"signal"`
		WaitForEvent *eventWait `json:"wait_for_event"`
	} `json:"steps"`
}

func (h *Handler) definition(r *http.Request, s *session, run *client.Run) *definition {
	ver, err := s.api.GetVersionWithResponse(r.Context(), run.Workflow, run.Version)
	if err != nil {
		return nil
	}
	raw, err := json.Marshal(ver.JSON200.Definition)
	if err != nil {
		return nil
	}
	var def definition
	if json.Unmarshal(raw, &def) != nil {
		return nil
	}
	return &def
}

// runState is the JSON the run page polls after each event: the run's status and
// each step's, to recolour the graph without a reload; the page reloads its parts
// when a step appears or the run's status or error changes.
func (h *Handler) runState(w http.ResponseWriter, r *http.Request, s *session) {
	id, ok := runID(r)
	if !ok {
		http.NotFound(w, r)
		return
	}
	// The steps first, then the run: a claim writes a step's running and its run's
	// running in one transaction, so the run read second is never behind the steps
	// (the other order showed a step running in a run still pending).
	steps, err := s.api.ListStepsWithResponse(r.Context(), id)
	if err != nil {
		status, msg := problemText(err)
		http.Error(w, msg, status)
		return
	}
	run, err := s.api.GetRunWithResponse(r.Context(), id)
	if err != nil {
		status, msg := problemText(err)
		http.Error(w, msg, status)
		return
	}
	items := deref(steps.JSON200.Items)
	out := struct {
		Status    string              `json:"status"`
		Remaining int64               `json:"steps_remaining"`
		Total     int64               `json:"steps_total"`
		Count     string              `json:"count"`
		Revision  int64               `json:"revision"`
		Terminal  bool                `json:"terminal"`
		Why       string              `json:"why"`
		Error     string              `json:"error"`
		Steps     map[string]string   `json:"steps"`
		States    map[string]string   `json:"states"`
		Attempts  map[string]int64    `json:"attempts"`
		Maps      map[string]*mapView `json:"maps"`
	}{Status: string(run.JSON200.Status), Terminal: run.JSON200.Status.Terminal(), Remaining: run.JSON200.StepsRemaining, Total: run.JSON200.StepsTotal,
		Count: stepCount(run.JSON200, items), Revision: run.JSON200.Revision,
		Steps: map[string]string{}, States: map[string]string{}, Attempts: map[string]int64{}, Maps: map[string]*mapView{}}
	if why := whyOf(run.JSON200, items); why != nil {
		out.Why = why.Text
	}
	if e := errorOf(run.JSON200.Error); e != nil {
		out.Error = e.Line()
	}
	for _, st := range items {
		out.Steps[st.Key] = string(st.Status)
		out.States[st.Key] = nodeState(st)
		out.Attempts[st.Key] = st.Attempts
		if m := mapViewOf(st.Map); m != nil {
			out.Maps[st.Key] = m
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(out)
}

// historyView is a page of the run's events, filtered by kind (?events=).
type historyView struct {
	Kind  string
	Kinds []string
	Items []eventView
	// Read is how many events the page read; Next the URL of the next page
	// (?events_page=, the API's cursor), Paged whether this is not the first.
	Read  int
	Next  string
	Paged bool
}

type eventView struct {
	client.Event
	Actor, Detail string
}

// historyKinds filter the history: every event, the run's, the steps', and what
// people did (events with an actor: start, cancel, retry, pause, signal, approval).
var historyKinds = []string{"all", "run", "steps", "people", "errors"}

// historyPage is how many events a page of the history reads.
const historyPage = 200

// historyOf reads a page of the run's events and keeps those of the kind the URL
// asks for.
func historyOf(r *http.Request, s *session, id openapi_types.UUID) *historyView {
	q := r.URL.Query()
	kind := q.Get("events")
	if !slices.Contains(historyKinds, kind) {
		kind = "all"
	}
	v := &historyView{Kind: kind, Kinds: historyKinds}
	p := &client.ListEventsParams{Limit: ptr(int64(historyPage))}
	if c := q.Get("events_page"); c != "" {
		p.Cursor, v.Paged = &c, true
	}
	res, err := s.api.ListEventsWithResponse(r.Context(), id, p)
	if err != nil {
		return v
	}
	for _, e := range deref(res.JSON200.Items) {
		v.Read++
		ev := eventView{Event: e}
		if m, ok := e.Data.(map[string]any); ok {
			ev.Actor, _ = m["actor"].(string)
			ev.Detail = eventDetail(m)
		}
		if keepEvent(kind, &ev) {
			v.Items = append(v.Items, ev)
		}
	}
	if next := res.JSON200.NextCursor; next != nil {
		nq := url.Values{"events_page": {*next}}
		if kind != "all" {
			nq.Set("events", kind)
		}
		v.Next = "/ui/runs/" + id.String() + "?" + nq.Encode() + "#history"
	}
	return v
}

func keepEvent(kind string, e *eventView) bool {
	switch kind {
	case "run":
		return strings.HasPrefix(e.Type, "run.")
	case "steps":
		return strings.HasPrefix(e.Type, "step.")
	case "people":
		return e.Actor != ""
	case "errors":
		return strings.HasSuffix(e.Type, ".failed") || strings.HasSuffix(e.Type, ".retrying") || e.Type == "run.canceled" || e.Type == "run.compensating"
	}
	return true
}

// eventDetail is the part of an event's data worth a line: its reason, comment,
// error, signal name, version moved to, steps.
func eventDetail(m map[string]any) string {
	var parts []string
	for _, k := range []string{"name", "reason", "comment", "from_step", "rerun_of", "version", "step"} {
		if v, ok := m[k]; ok && v != nil && v != "" {
			parts = append(parts, k+" "+fmt.Sprint(v))
		}
	}
	if steps, ok := m["steps"].([]any); ok && len(steps) > 0 {
		var keys []string
		for _, s := range steps {
			keys = append(keys, fmt.Sprint(s))
		}
		if len(keys) > 8 {
			keys = append(keys[:8], fmt.Sprintf("… %d more", len(keys)-8))
		}
		parts = append(parts, "steps "+strings.Join(keys, ", "))
	}
	if e := errorOf(m["error"]); e != nil {
		parts = append(parts, e.Line())
	}
	return strings.Join(parts, " · ")
}

// tryView is an earlier try of a run (before a retry): the steps the retry ran
// again or that its failure had run (compensations, on_failure), as they were.
type tryView struct {
	Try   int64
	Steps []triedStep
}

type triedStep struct {
	client.Step
	Err *errView
}

// triesOf reads the steps of the run's earlier tries (GET …/step-history).
func triesOf(r *http.Request, s *session, id openapi_types.UUID) []tryView {
	res, err := s.api.ListStepHistoryWithResponse(r.Context(), id)
	if err != nil {
		return nil
	}
	var out []tryView
	for _, t := range deref(res.JSON200.Items) {
		if len(out) == 0 || out[len(out)-1].Try != t.Try {
			out = append(out, tryView{Try: t.Try})
		}
		last := &out[len(out)-1]
		last.Steps = append(last.Steps, triedStep{Step: t.Step, Err: errorOf(t.Step.LastError)})
	}
	return out
}

// historyURL is the run page's URL with another history filter.
func historyURL(id, kind string) string {
	if kind == "all" {
		return "/ui/runs/" + id + "#history"
	}
	return "/ui/runs/" + id + "?events=" + url.QueryEscape(kind) + "#history"
}
