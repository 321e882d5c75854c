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
// than the client's type so that what the server adds to an event's outcome
// (skipped: the starts that flow control skipped) is shown as it comes.
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
	// Skipped are the starts the server skipped (a singleton's skip), each an
	// object: shown by SkippedText.
	Skipped []map[string]any `json:"skipped"`
	Errors  []struct {
		Workflow string  `json:"workflow"`
		Version  int64   `json:"version"`
		Where    string  `json:"where"`
		RunID    *string `json:"run_id"`
		Message  string  `json:"message"`
	} `json:"errors"`
}

// skippedView is a skipped start as the pages say it, with the run it names
// (the one that was kept), if any.
type skippedView struct {
	Text  string
	RunID string
}

// SkippedText says each skipped start: the workflow and version, the trigger,
// why, and the run it names; an entry of another shape as its JSON.
func (e *receivedEvent) SkippedText() []skippedView {
	out := make([]skippedView, 0, len(e.Skipped))
	for _, s := range e.Skipped {
		var v skippedView
		var parts []string
		if wf, ok := s["workflow"].(string); ok {
			t := wf
			if ver, ok := s["version"].(float64); ok {
				t += fmt.Sprintf(" v%.0f", ver)
			}
			if tr, ok := s["trigger"].(float64); ok {
				t += fmt.Sprintf(" triggers[%.0f]", tr)
			}
			parts = append(parts, t)
		}
		for _, k := range []string{"reason", "mode", "key"} {
			if x, ok := s[k].(string); ok && x != "" {
				parts = append(parts, k+" "+x)
			}
		}
		for _, k := range []string{"run_id", "active_run", "kept_run"} {
			if x, ok := s[k].(string); ok && x != "" {
				v.RunID = x
				break
			}
		}
		if len(parts) == 0 {
			b, _ := json.Marshal(s)
			parts = append(parts, string(b))
		}
		v.Text = strings.Join(parts, ", ")
		out = append(out, v)
	}
	return out
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
