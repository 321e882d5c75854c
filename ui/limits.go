package ui

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/client"
)

// limitsView is the limits page's data: GET /v1/limits, and whether the session
// may change a limit (admin: the page shows the form).
type limitsView struct {
	Keys      []client.LimitKey
	Rates     []client.RateKey
	Overrides []client.LimitOverride
	// Names are the concurrency limits the page knows of (in use or set), for the
	// form's suggestions.
	Names    []string
	CanAdmin bool
	// Set names the limit just changed (after the form's redirect).
	Set string
}

// limitsPage shows the concurrency keys in use, the rate limits' buckets and the
// limits set at run time.
func (h *Handler) limitsPage(w http.ResponseWriter, r *http.Request, s *session) {
	params := &client.ListLimitsParams{}
	if name := r.URL.Query().Get("name"); name != "" {
		params.Name = &name
	}
	res, err := s.api.ListLimitsWithResponse(r.Context(), params)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	v := &limitsView{Keys: deref(res.JSON200.Keys), Rates: deref(res.JSON200.Rates), Overrides: deref(res.JSON200.Overrides),
		CanAdmin: s.who.Role >= api.RoleAdmin, Set: r.URL.Query().Get("set")}
	for _, k := range v.Keys {
		v.Names = append(v.Names, k.Name)
	}
	for _, o := range v.Overrides {
		v.Names = append(v.Names, o.Name)
	}
	slices.Sort(v.Names)
	v.Names = slices.Compact(v.Names)
	h.render(w, r, s, "limits", v)
}

// setLimit changes a concurrency limit (PUT /v1/limits/{name}: the API lets admins
// only).
func (h *Handler) setLimit(w http.ResponseWriter, r *http.Request, s *session) {
	name := r.PostFormValue("name")
	n, err := strconv.ParseInt(r.PostFormValue("concurrency"), 10, 64)
	if err != nil {
		h.renderStatus(w, r, s, "error", http.StatusBadRequest, map[string]any{"Status": 400, "Message": "concurrency is not a whole number"})
		return
	}
	_, err = s.api.PutLimitWithResponse(r.Context(), name, client.PutLimitBody{Concurrency: &n})
	h.done(w, r, s, err, "/ui/limits?set="+url.QueryEscape(name), "Limit "+name+" set to "+strconv.FormatInt(n, 10)+".")
}
