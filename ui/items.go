package ui

import (
	"net/http"
	"net/url"
	"strconv"
	"time"

	openapi_types "github.com/oapi-codegen/runtime/types"

	"github.com/cairnrun/cairn/client"
)

// itemsPageSize is how many items a page of a map's items shows.
const itemsPageSize = 100

// itemStatuses are the states the items page filters by.
var itemStatuses = []string{"waiting", "ready", "running", "suspended", "succeeded", "failed", "canceled", "skipped"}

// itemRow is an item of the items page.
type itemRow struct {
	client.Item
	ItemText string
	Err      *errView
}

// itemsPage lists a map step's items, a page at a time (?after=, the index the
// page starts after), filtered by status (?status=).
func (h *Handler) itemsPage(w http.ResponseWriter, r *http.Request, s *session) {
	id, ok := runID(r)
	if !ok {
		http.NotFound(w, r)
		return
	}
	key := r.PathValue("key")
	q := r.URL.Query()
	params := &client.ListItemsParams{Limit: ptr(int64(itemsPageSize))}
	status := q.Get("status")
	if status != "" {
		st := client.ListItemsParamsStatus(status)
		params.Status = &st
	}
	if n, err := strconv.ParseInt(q.Get("after"), 10, 64); err == nil {
		params.After = &n
	}
	start := time.Now()
	res, err := s.api.ListItemsWithResponse(r.Context(), id, key, params)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	steps, err := s.api.ListStepsWithResponse(r.Context(), id)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	var step client.Step
	for _, st := range deref(steps.JSON200.Items) {
		if st.Key == key {
			step = st
		}
	}
	var rows []itemRow
	for _, it := range deref(res.JSON200.Items) {
		txt := jsonString(it.Item)
		if len(txt) > 120 {
			txt = txt[:119] + "…"
		}
		rows = append(rows, itemRow{Item: it, ItemText: txt, Err: errorOf(it.LastError)})
	}
	base := "/ui/runs/" + id.String() + "/steps/" + url.PathEscape(key) + "/items"
	data := map[string]any{
		"Title": "Items of " + key + " · run " + shortID(id.String()), "RunID": id.String(), "Key": key, "Step": step,
		"Items": rows, "Status": status, "Statuses": itemStatuses, "Base": base,
	}
	if step.Map != nil {
		data["Progress"] = mapCount(step.Map)
	}
	if params.After != nil {
		fq := url.Values{}
		if status != "" {
			fq.Set("status", status)
		}
		data["FirstURL"] = base + "?" + fq.Encode()
	}
	if next := res.JSON200.NextAfter; next != nil {
		nq := url.Values{"after": {strconv.FormatInt(*next, 10)}}
		if status != "" {
			nq.Set("status", status)
		}
		data["NextURL"] = base + "?" + nq.Encode()
	}
	data["Elapsed"] = time.Since(start).Round(time.Millisecond).String()
	h.render(w, r, s, "items", data)
}

// itemPage shows one item of a map: its item, status, error, attempts, the log of
// its last attempt and its output.
func (h *Handler) itemPage(w http.ResponseWriter, r *http.Request, s *session) {
	id, key, index, ok := itemOf(r)
	if !ok {
		http.NotFound(w, r)
		return
	}
	ctx := r.Context()
	res, err := s.api.ListItemsWithResponse(ctx, id, key, &client.ListItemsParams{After: ptr(index - 1), Limit: ptr(int64(1))})
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	items := deref(res.JSON200.Items)
	if len(items) == 0 || items[0].Index != index {
		h.renderStatus(w, r, s, "error", http.StatusNotFound, map[string]any{"Status": 404, "Message": "map step " + key + " has no item " + strconv.FormatInt(index, 10)})
		return
	}
	it := items[0]
	data := map[string]any{"Title": "Item " + it.Key + " · run " + shortID(id.String()), "RunID": id.String(), "Key": key, "Item": it,
		"ItemJSON": pretty(it.Item), "Output": pretty(it.Output), "Err": errorOf(it.LastError),
		"Base": "/ui/runs/" + id.String() + "/steps/" + url.PathEscape(key) + "/items"}
	var attempts []attemptView
	var logAttempt int64
	if at, err := s.api.ListItemAttemptsWithResponse(ctx, id, key, index); err == nil {
		list := deref(at.JSON200.Items)
		for i, a := range list {
			av := attemptView{Attempt: a, Shown: string(a.Status), Err: errorOf(a.Error), Duration: duration(&a.StartedAt, a.FinishedAt),
				Last: i == len(list)-1 && it.Status != client.ItemStatusSucceeded}
			attempts = append(attempts, av)
			if a.HasLog {
				logAttempt = a.Number
			}
		}
	}
	data["Attempts"] = attempts
	if logAttempt > 0 {
		if resp, err := s.api.GetItemLog(ctx, id, key, index, &client.GetItemLogParams{Attempt: &logAttempt}); err == nil {
			if resp.StatusCode == http.StatusOK {
				data["Log"], _ = tail(resp.Body, logTail)
				data["LogAttempt"] = logAttempt
			}
			resp.Body.Close()
		}
	}
	h.render(w, r, s, "items", map[string]any{"Title": data["Title"], "One": data})
}

// itemLog and itemOutput stream an item's log (?attempt=N) and output as
// downloads.
func (h *Handler) itemLog(w http.ResponseWriter, r *http.Request, s *session) {
	id, key, index, ok := itemOf(r)
	if !ok {
		http.NotFound(w, r)
		return
	}
	p := &client.GetItemLogParams{}
	if n, err := strconv.ParseInt(r.URL.Query().Get("attempt"), 10, 64); err == nil {
		p.Attempt = &n
	}
	resp, err := s.api.GetItemLog(r.Context(), id, key, index, p)
	relay(w, resp, err, key+"-"+r.PathValue("index")+".log")
}

func (h *Handler) itemOutput(w http.ResponseWriter, r *http.Request, s *session) {
	id, key, index, ok := itemOf(r)
	if !ok {
		http.NotFound(w, r)
		return
	}
	resp, err := s.api.GetItemOutput(r.Context(), id, key, index)
	relay(w, resp, err, key+"-"+r.PathValue("index")+"-output")
}

// itemOf reads the run ID, the map step's key and the item's index of a path.
func itemOf(r *http.Request) (openapi_types.UUID, string, int64, bool) {
	id, ok := runID(r)
	index, err := strconv.ParseInt(r.PathValue("index"), 10, 64)
	return id, r.PathValue("key"), index, ok && err == nil && index >= 0
}
