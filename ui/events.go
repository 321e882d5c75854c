package ui

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/cairnrun/cairn/client"
)

// receivedEvent is what the events pages show of a received event (GET
// /v1/events, GET /v1/events/{id}): it is read from the answer's JSON rather
// than the client's type, so that what the flow control of triggers did with
// the event (flow: skipped, canceled_other, queued, debounced, batched) is shown
// from whatever fields its entries have.
type receivedEvent struct {
	EventID    string          `json:"event_id"`
	Name       string          `json:"name"`
	ReceivedAt time.Time       `json:"received_at"`
	Actor      string          `json:"actor"`
	Data       json.RawMessage `json:"data"`
	Started    []struct {
		RunID    string `json:"run_id"`
		Workflow string `json:"workflow"`
		Version  int64  `json:"version"`
		Trigger  int64  `json:"trigger"`
	} `json:"started"`
	Resumed []struct {
		RunID string `json:"run_id"`
		Step  string `json:"step"`
	} `json:"resumed"`
	Canceled []string `json:"canceled"`
	// Flow is what flow control did with the event, an entry per trigger of
	// flow control it matched: shown by FlowText.
	Flow   []map[string]any `json:"flow"`
	Errors []struct {
		Workflow string  `json:"workflow"`
		Version  int64   `json:"version"`
		Where    string  `json:"where"`
		RunID    *string `json:"run_id"`
		Message  string  `json:"message"`
	} `json:"errors"`
}

// flowView is an entry of an event's flow as the pages say it: its action
// (skipped, queued, …), the run it names, if any, and the rest in words.
type flowView struct {
	Action string
	RunID  string
	Text   string
}

// FlowText says each entry of the event's flow: the workflow, version and
// trigger, the kind of flow control, its key, the window or queued start and
// its events; an entry of another shape as its JSON.
func (e *receivedEvent) FlowText() []flowView {
	out := make([]flowView, 0, len(e.Flow))
	for _, f := range e.Flow {
		var v flowView
		v.Action, _ = f["action"].(string)
		v.RunID, _ = f["run_id"].(string)
		var parts []string
		if wf, ok := f["workflow"].(string); ok {
			t := wf
			if ver, ok := f["version"].(float64); ok {
				t += fmt.Sprintf(" v%.0f", ver)
			}
			if tr, ok := f["trigger"].(float64); ok {
				t += fmt.Sprintf(" triggers[%.0f]", tr)
			}
			parts = append(parts, t)
		}
		if k, ok := f["kind"].(string); ok && k != "" {
			parts = append(parts, k)
		}
		if k, ok := f["key"].(string); ok && k != "" {
			parts = append(parts, "key "+k)
		}
		if n, ok := f["events"].(float64); ok && n > 0 {
			parts = append(parts, fmt.Sprintf("%.0f events held", n))
		}
		if due, ok := f["due_at"].(string); ok && due != "" {
			parts = append(parts, "due "+due)
		}
		if v.Action == "" && len(parts) == 0 {
			b, _ := json.Marshal(f)
			parts = append(parts, string(b))
		}
		v.Text = strings.Join(parts, ", ")
		out = append(out, v)
	}
	return out
}

// Skipped is how many of the event's starts flow control skipped.
func (e *receivedEvent) Skipped() int {
	n := 0
	for _, f := range e.Flow {
		if f["action"] == "skipped" {
			n++
		}
	}
	return n
}

// Runs are the distinct runs the event touched, for its page's summary.
func (e *receivedEvent) Runs() int {
	seen := map[string]bool{}
	for _, s := range e.Started {
		seen[s.RunID] = true
	}
	for _, r := range e.Resumed {
		seen[r.RunID] = true
	}
	for _, c := range e.Canceled {
		seen[c] = true
	}
	return len(seen)
}

// DataText is the event's data as indented JSON.
func (e *receivedEvent) DataText() string {
	var v any
	if json.Unmarshal(e.Data, &v) != nil {
		return string(e.Data)
	}
	return pretty(v)
}

// eventsView is the events page's data.
type eventsView struct {
	Name  string
	Items []receivedEvent
	Next  string
	// Names are the names among the page's events, for the filter's suggestions.
	Names []string
}

// eventsPage lists received events, newest first, filtered by name (?name=).
func (h *Handler) eventsPage(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	params := &client.ListReceivedEventsParams{Limit: ptr(int64(h.cfg.PageSize))}
	v := &eventsView{Name: strings.TrimSpace(q.Get("name"))}
	if v.Name != "" {
		params.Name = &v.Name
	}
	if c := q.Get("cursor"); c != "" {
		params.Cursor = &c
	}
	res, err := s.api.ListReceivedEventsWithResponse(r.Context(), params)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	var page struct {
		Items      []receivedEvent `json:"items"`
		NextCursor string          `json:"next_cursor"`
	}
	if err := json.Unmarshal(res.Body, &page); err != nil {
		h.fail(w, r, s, fmt.Errorf("read the events: %w", err))
		return
	}
	v.Items, v.Next = page.Items, page.NextCursor
	names := map[string]bool{}
	for _, e := range v.Items {
		if !names[e.Name] {
			names[e.Name] = true
			v.Names = append(v.Names, e.Name)
		}
	}
	sort.Strings(v.Names)
	h.render(w, r, s, "events", v)
}

// eventPage shows one received event: its data and every run it touched.
func (h *Handler) eventPage(w http.ResponseWriter, r *http.Request, s *session) {
	id := r.PathValue("id")
	res, err := s.api.GetReceivedEventWithResponse(r.Context(), id)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	var ev receivedEvent
	if err := json.Unmarshal(res.Body, &ev); err != nil {
		h.fail(w, r, s, fmt.Errorf("read the event: %w", err))
		return
	}
	h.render(w, r, s, "event", map[string]any{"Title": "Event " + ev.Name + " " + ev.EventID, "Event": &ev})
}
