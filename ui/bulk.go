package ui

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/cairnrun/cairn/client"
)

// confirmView is the page that asks before an action on many runs: it names the
// action and the number of runs, and posts the same form again with confirmed.
type confirmView struct {
	Title, Text, Button, Action, Back string
	Fields                            []field
}

type field struct{ Name, Value string }

// askFirst shows the confirmation page for the form r posted (its fields kept),
// unless the form says it was confirmed: it then returns true.
func (h *Handler) askFirst(w http.ResponseWriter, r *http.Request, s *session, title, text, button, back string) bool {
	if r.PostFormValue("confirmed") == "yes" {
		return true
	}
	v := &confirmView{Title: title, Text: text, Button: button, Action: r.URL.Path, Back: back}
	for k, vs := range r.PostForm {
		if k == "csrf" || k == "confirmed" {
			continue
		}
		for _, x := range vs {
			v.Fields = append(v.Fields, field{k, x})
		}
	}
	slices.SortStableFunc(v.Fields, func(a, b field) int { return strings.Compare(a.Name, b.Name) })
	h.render(w, r, s, "confirm", map[string]any{"Title": title, "Confirm": v})
	return false
}

// bulkActions are the actions of a bulk operation, and how a sentence says them;
// bulkDone how it says they were done.
var (
	bulkActions = map[string]string{"cancel": "Cancel", "retry": "Retry", "pause": "Pause", "resume": "Resume"}
	bulkDone    = map[string]string{"cancel": "canceled", "retry": "retried", "pause": "paused", "resume": "resumed"}
)

// countMax is the most runs a confirmation counts exactly.
const countMax = 10000

// countRuns counts the runs params match, up to countMax (more: there are more).
func countRuns(r *http.Request, s *session, params client.ListRunsParams) (n int, more bool, err error) {
	params.Limit = ptr(int64(1000))
	for {
		res, err := s.api.ListRunsWithResponse(r.Context(), &params)
		if err != nil {
			return 0, false, err
		}
		n += len(deref(res.JSON200.Items))
		if res.JSON200.NextCursor == nil {
			return n, false, nil
		}
		if n >= countMax {
			return n, true, nil
		}
		params.Cursor = res.JSON200.NextCursor
	}
}

// runsText says a count of runs: "3 runs", "more than 10000 runs".
func runsText(n int, more bool, noun string) string {
	if more {
		return fmt.Sprintf("more than %d %ss", n, noun)
	}
	return plural(n, noun)
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// bulk acts on every run the list's filter matches (POST /v1/runs:bulk), after a
// confirmation naming the action and the count; then the operation's page.
func (h *Handler) bulk(w http.ResponseWriter, r *http.Request, s *session) {
	f := filterOf(r.PostForm)
	params, filter, err := f.params()
	if err != nil {
		h.renderStatus(w, r, s, "error", http.StatusBadRequest, map[string]any{"Status": 400, "Message": err.Error()})
		return
	}
	action := r.PostFormValue("action")
	verb, ok := bulkActions[action]
	if !ok {
		h.renderStatus(w, r, s, "error", http.StatusBadRequest, map[string]any{"Status": 400, "Message": "choose an action: cancel, retry, pause or resume"})
		return
	}
	back := "/ui/runs?" + f.query().Encode()
	if r.PostFormValue("confirmed") != "yes" {
		count, more, err := countRuns(r, s, *params)
		if err != nil {
			h.fail(w, r, s, err)
			return
		}
		n := runsText(count, more, "run")
		if !h.askFirst(w, r, s, verb+" "+n+"?", verb+" every run this filter matches: "+n+" now ("+describe(f)+"). Runs that cannot be "+
			bulkDone[action]+" are skipped, and the operation's page says why.", verb+" "+n, back) {
			return
		}
	}
	res, err := s.api.BulkRunsWithResponse(r.Context(), client.BulkBody{Action: client.BulkBodyAction(action), Filter: filter})
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	h.done(w, r, s, nil, "/ui/operations/"+res.JSON202.Id+"?back="+url.QueryEscape(back), "Bulk "+action+" started.")
}

// describe says a filter in words.
func describe(f runFilter) string {
	q := f.query()
	if len(q) == 0 {
		return "no filter: every run"
	}
	var parts []string
	for _, k := range []string{"workflow", "status", "label", "version", "created_after", "created_before", "error_code", "parent"} {
		for _, v := range q[k] {
			parts = append(parts, k+" "+v)
		}
	}
	return strings.Join(parts, ", ")
}

// selectedResult is what an action did to one of the ticked runs.
type selectedResult struct {
	RunID, Outcome, Detail string
}

// bulkSelected acts on the runs ticked in the runs list, one request each, after
// a confirmation naming the action and the count; then a page listing what it did
// to each run (applied, or skipped and why).
func (h *Handler) bulkSelected(w http.ResponseWriter, r *http.Request, s *session) {
	action := r.PostFormValue("action")
	verb, ok := bulkActions[action]
	ids := r.PostForm["run"]
	back := safeNext(r.PostFormValue("back"))
	if !ok || len(ids) == 0 {
		h.renderStatus(w, r, s, "error", http.StatusBadRequest, map[string]any{"Status": 400, "Back": back,
			"Message": "tick the runs to act on, and choose an action: cancel, retry, pause or resume"})
		return
	}
	if len(ids) > 1000 {
		ids = ids[:1000]
	}
	n := plural(len(ids), "selected run")
	if !h.askFirst(w, r, s, verb+" "+n+"?", verb+" "+n+": "+shortList(ids)+". Runs that cannot be "+bulkDone[action]+" are skipped, and the next page says why.", verb+" "+n, back) {
		return
	}
	var results []selectedResult
	applied := 0
	for _, raw := range ids {
		id, err := parseUUID(raw)
		if err != nil {
			results = append(results, selectedResult{RunID: raw, Outcome: "skipped", Detail: "not a run ID"})
			continue
		}
		ctx := r.Context()
		switch action {
		case "cancel":
			_, err = s.api.CancelRunWithResponse(ctx, id, client.CancelRunRequest{})
		case "retry":
			_, err = s.api.RetryRunWithResponse(ctx, id, &client.RetryRunParams{}, client.RetryRunBody{})
		case "pause":
			_, err = s.api.PauseRunWithResponse(ctx, id, client.ControlBody{})
		case "resume":
			_, err = s.api.ResumeRunWithResponse(ctx, id, client.ControlBody{})
		}
		if err != nil {
			_, msg := problemText(err)
			results = append(results, selectedResult{RunID: raw, Outcome: "skipped", Detail: msg})
			continue
		}
		applied++
		results = append(results, selectedResult{RunID: raw, Outcome: "applied"})
	}
	op := &client.Operation{Action: client.OperationAction(action), Status: client.OperationStatusSucceeded, Actor: s.who.Name,
		Total: int64(len(ids)), Processed: int64(len(ids)), Applied: int64(applied), Skipped: int64(len(ids) - applied)}
	h.render(w, r, s, "operation", map[string]any{"Title": "Bulk " + action + " of " + n, "Op": op, "Percent": 100,
		"Runs": results, "Back": back, "Selected": true})
}

// shortList names up to five runs by their short IDs.
func shortList(ids []string) string {
	var out []string
	for i, id := range ids {
		if i == 5 {
			out = append(out, fmt.Sprintf("and %d more", len(ids)-5))
			break
		}
		out = append(out, shortID(id))
	}
	return strings.Join(out, ", ")
}

// operationPage shows a bulk operation's progress and what it did to each run;
// the page follows it while it runs.
func (h *Handler) operationPage(w http.ResponseWriter, r *http.Request, s *session) {
	id, ok := runID(r)
	if !ok {
		http.NotFound(w, r)
		return
	}
	res, err := s.api.GetOperationWithResponse(r.Context(), id)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	op := res.JSON200
	pct := 100
	if op.Total > 0 {
		pct = int(op.Processed * 100 / op.Total)
	}
	var results []selectedResult
	if runs, err := s.api.ListOperationRunsWithResponse(r.Context(), id, &client.ListOperationRunsParams{Limit: ptr(int64(1000))}); err == nil {
		for _, or := range deref(runs.JSON200.Items) {
			results = append(results, selectedResult{RunID: or.RunId, Outcome: string(or.Outcome), Detail: derefStr(or.Detail)})
		}
	}
	h.render(w, r, s, "operation", map[string]any{"Title": "Bulk " + string(op.Action) + " · " + string(op.Status), "Op": op, "Percent": pct,
		"Filter": pretty(op.Filter), "Error": errorOf(op.Error), "Back": safeNext(r.URL.Query().Get("back")), "Runs": results})
}

// pauseWorkflow pauses every unfinished run of a workflow and those it starts,
// after a confirmation naming the number of runs it pauses now.
func (h *Handler) pauseWorkflow(w http.ResponseWriter, r *http.Request, s *session) {
	name := r.PathValue("name")
	page := "/ui/workflows/" + url.PathEscape(name)
	if r.PostFormValue("confirmed") != "yes" {
		var total int
		var counts []string
		for _, st := range []string{"pending", "running"} {
			status := client.ListRunsParamsStatus(st)
			n, more, err := countRuns(r, s, client.ListRunsParams{Workflow: &name, Status: &status})
			if err != nil {
				h.fail(w, r, s, err)
				return
			}
			counts = append(counts, runsText(n, more, "run")+" "+st)
			total += n
		}
		if !h.askFirst(w, r, s, "Pause workflow "+name+"?", "Pause workflow "+name+": its "+plural(total, "unfinished run")+" ("+strings.Join(counts, ", ")+
			") pause, and so do the runs it starts until it is resumed. Running attempts finish.", "Pause "+name+" and "+plural(total, "run"), page) {
			return
		}
	}
	_, err := s.api.PauseWorkflowWithResponse(r.Context(), name, client.ControlBody{Reason: optional(r.PostFormValue("reason"))})
	h.done(w, r, s, err, page, "Workflow "+name+" paused.")
}
