package ui

import (
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/cairnrun/cairn/client"
)

// auditView is the audit page's data: a page of GET /v1/audit (admins only: the
// API refuses the others, and the page shows its 403), with the filters.
type auditView struct {
	Items                []client.AuditRecord
	Actor, Action, Since string
	// Next is the URL of the next page; "" on the last.
	Next string
}

// PageTitle names the page.
func (auditView) PageTitle() string { return "Audit log" }

// auditPageSize is how many records a page of the audit page shows.
const auditPageSize = 100

// auditPage shows the audit log, newest first, filtered by actor, action and
// since (an RFC 3339 time or a duration ago, as cairn audit list takes).
func (h *Handler) auditPage(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	v := &auditView{Actor: q.Get("actor"), Action: q.Get("action"), Since: q.Get("since")}
	limit := int64(auditPageSize)
	p := &client.ListAuditParams{Limit: &limit}
	if v.Actor != "" {
		p.Actor = &v.Actor
	}
	if v.Action != "" {
		p.Action = &v.Action
	}
	if v.Since != "" {
		t, err := time.Parse(time.RFC3339, v.Since)
		if err != nil {
			d, derr := time.ParseDuration(v.Since)
			if derr != nil || d < 0 {
				h.renderStatus(w, r, s, "error", http.StatusBadRequest, map[string]any{"Status": 400,
					"Message": "since: give a time (RFC 3339) or a duration ago (24h)"})
				return
			}
			t = time.Now().Add(-d).Truncate(time.Second)
			// The cursor is bound to the filters: the next pages keep this time.
			v.Since = t.UTC().Format(time.RFC3339)
		}
		p.Since = &t
	}
	if c := q.Get("cursor"); c != "" {
		p.Cursor = &c
	}
	res, err := s.api.ListAuditWithResponse(r.Context(), p)
	if err == nil && res.JSON200 == nil {
		err = fmt.Errorf("list the audit log: status %d without a list", res.StatusCode())
	}
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	v.Items = deref(res.JSON200.Items)
	if next := derefStr(res.JSON200.NextCursor); next != "" {
		nq := url.Values{"cursor": {next}}
		for k, val := range map[string]string{"actor": v.Actor, "action": v.Action, "since": v.Since} {
			if val != "" {
				nq.Set(k, val)
			}
		}
		v.Next = "/ui/audit?" + nq.Encode()
	}
	h.render(w, r, s, "audit", v)
}
