package ui

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"github.com/cairnrun/cairn/client"
)

// runIDLike is what the search box takes as a run ID, whole or short: hex digits
// and dashes, 8 to 36 of them.
var runIDLike = regexp.MustCompile(`^[0-9a-fA-F-]{8,36}$`)

// search answers the header's search box (?q=): a run ID (whole, or the short ID
// the UI shows, or the first digits) opens the run; key=value lists the runs with
// that label; a workflow's name lists its runs. Anything else, a page that says
// nothing matched, with the workflows whose names contain it.
func (h *Handler) search(w http.ResponseWriter, r *http.Request, s *session) {
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	switch {
	case q == "":
		http.Redirect(w, r, "/ui/runs", http.StatusSeeOther)
		return
	case runIDLike.MatchString(q) && strings.ContainsAny(q, "0123456789"):
		h.lookup(w, r, s, strings.ToLower(q), "")
		return
	case strings.Contains(q, "="):
		lq := url.Values{}
		for _, l := range strings.Fields(q) {
			lq.Add("label", l)
		}
		http.Redirect(w, r, "/ui/runs?"+lq.Encode(), http.StatusSeeOther)
		return
	}
	var similar []string
	for _, name := range workflowNames(r, s, "") {
		if name == q {
			http.Redirect(w, r, "/ui/runs?workflow="+url.QueryEscape(q), http.StatusSeeOther)
			return
		}
		if strings.Contains(name, strings.ToLower(q)) {
			similar = append(similar, name)
		}
	}
	if len(similar) == 1 {
		http.Redirect(w, r, "/ui/runs?workflow="+url.QueryEscape(similar[0]), http.StatusSeeOther)
		return
	}
	msg := "No run ID, workflow or label matches “" + q + "”."
	if len(similar) > 0 {
		msg += " Workflows whose names contain it: " + strings.Join(similar, ", ") + "."
	}
	h.renderStatus(w, r, s, "error", http.StatusNotFound, map[string]any{"Status": 404, "Title": "Nothing matches " + q, "Message": msg})
}

// approvalView is a step waiting for approval, for the inbox.
type approvalView struct {
	Run  client.Run
	Step client.Step
}

// approvalsScan is how many unfinished runs the inbox reads the steps of.
const approvalsScan = 500

// approvalsPage lists the steps waiting for an approval that this session's role
// may give (the approval's roles, or admin): the inbox. It reads the steps of the
// newest approvalsScan running runs.
func (h *Handler) approvalsPage(w http.ResponseWriter, r *http.Request, s *session) {
	st := client.ListRunsParamsStatus("running")
	var runs []client.Run
	var cursor *string
	for len(runs) < approvalsScan {
		res, err := s.api.ListRunsWithResponse(r.Context(), &client.ListRunsParams{Status: &st, Limit: ptr(int64(500)), Cursor: cursor})
		if err != nil {
			h.fail(w, r, s, err)
			return
		}
		runs = append(runs, deref(res.JSON200.Items)...)
		if res.JSON200.NextCursor == nil {
			break
		}
		cursor = res.JSON200.NextCursor
	}
	var out []approvalView
	for i := range runs {
		id, err := parseUUID(runs[i].Id)
		if err != nil {
			continue
		}
		steps, err := s.api.ListStepsWithResponse(r.Context(), id)
		if err != nil {
			continue
		}
		for _, stp := range deref(steps.JSON200.Items) {
			if stp.Status == client.StepStatusSuspended && stp.WaitingFor != nil && stp.WaitingFor.Kind == client.WaitingForKindApproval &&
				h.mayDecide(r, s, &runs[i], stp.Key) {
				out = append(out, approvalView{Run: runs[i], Step: stp})
			}
		}
	}
	h.render(w, r, s, "approvals", map[string]any{"Items": out, "Scanned": len(runs), "Capped": len(runs) >= approvalsScan})
}
