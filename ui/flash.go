package ui

import (
	"net/http"
	"net/url"
)

// flashCookie carries what an action did to the page its redirect leads to,
// once: the page shows it and clears it.
const flashCookie = "cairn_flash"

// setFlash keeps msg for the next page the browser opens.
func setFlash(w http.ResponseWriter, r *http.Request, msg string) {
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: url.QueryEscape(msg), Path: Prefix, MaxAge: 60,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
}

// takeFlash returns the message an action left, and clears it.
func takeFlash(w http.ResponseWriter, r *http.Request) string {
	c, err := r.Cookie(flashCookie)
	if err != nil || c.Value == "" {
		return ""
	}
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: "", Path: Prefix, MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	msg, err := url.QueryUnescape(c.Value)
	if err != nil || len(msg) > 300 {
		return ""
	}
	return msg
}

// done answers an action that worked: back to next, with msg shown there; or the
// problem as a page.
func (h *Handler) done(w http.ResponseWriter, r *http.Request, s *session, err error, next, msg string) {
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	setFlash(w, r, msg)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// navOf is the header's section of each page.
var navOf = map[string]string{
	"runs": "runs", "run": "runs", "operation": "runs", "items": "runs", "confirm": "runs",
	"workflows": "workflows", "workflow": "workflows", "schedules": "schedules", "limits": "limits",
	"approvals": "approvals", "events": "events", "event": "events", "audit": "audit",
}

// pageTitles are the titles of pages whose data names none.
var pageTitles = map[string]string{
	"runs": "Runs", "workflows": "Workflows", "schedules": "Schedules", "limits": "Limits",
	"approvals": "Approvals", "events": "Events", "login": "Log in", "error": "Error",
}

// titleOf is a page's title: its data's "Title" when it has one.
func titleOf(page string, data any) string {
	if m, ok := data.(map[string]any); ok {
		if t, ok := m["Title"].(string); ok && t != "" {
			return t
		}
	}
	if t, ok := data.(interface{ PageTitle() string }); ok {
		return t.PageTitle()
	}
	if t, ok := pageTitles[page]; ok {
		return t
	}
	return page
}

// navItem is a link of the header: its path under /ui/, its name, and the key
// that goes there after g (g r: runs).
type navItem struct{ Path, Name, Key string }

var navItems = []navItem{
	{"runs", "Runs", "r"}, {"approvals", "Approvals", "a"}, {"events", "Events", "e"}, {"workflows", "Workflows", "w"},
	{"schedules", "Schedules", "s"}, {"limits", "Limits", "l"}, {"audit", "Audit", "u"},
}
