package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/cairnrun/cairn/catalog"
)

// Event is an entry of a run's history. Seq numbers a run's events 1, 2, 3, … in
// commit order, without gaps; it is the SSE event ID.
type Event struct {
	Seq       int64           `json:"seq"`
	Type      string          `json:"type" doc:"run.created, step.started, step.succeeded, step.retrying, step.failed, step.skipped, step.checkpointed, step.progress, step.handed_back, run.succeeded, run.failed, run.canceled"`
	Step      string          `json:"step,omitempty"`
	Attempt   int             `json:"attempt,omitempty"`
	Data      json.RawMessage `json:"data"`
	CreatedAt time.Time       `json:"created_at"`
}

func eventOf(e *catalog.Event) Event {
	return Event{Seq: e.Seq, Type: e.Type, Step: e.StepKey, Attempt: e.Attempt, Data: jsonOrNull(e.Data), CreatedAt: e.CreatedAt.UTC()}
}

// isFinal reports whether an event ends a run's history.
func isFinal(typ string) bool {
	return typ == "run.succeeded" || typ == "run.failed" || typ == "run.canceled"
}

func isTerminalRun(status string) bool {
	return status == catalog.RunSucceeded || status == catalog.RunFailed || status == catalog.RunCanceled
}

// ssePollInterval is how often a live stream looks for new events.
const ssePollInterval = 100 * time.Millisecond

func (s *Server) registerEvents() {
	register(s, huma.Operation{
		OperationID: "listEvents",
		Method:      http.MethodGet,
		Path:        "/v1/runs/{id}/events",
		Summary:     "List a run's events",
		Description: "The run's history in order, keyset-paginated.",
		Tags:        []string{"runs"},
		Errors:      []int{http.StatusBadRequest, http.StatusNotFound},
	}, RoleViewer, func(ctx context.Context, in *struct {
		RunIDParam
		PageParams
	}) (*listOutput[Event], error) {
		id, err := in.uuid()
		if err != nil {
			return nil, err
		}
		var after int64
		if err := decodeCursor(in.Cursor, "events", id.String(), &after); err != nil {
			return nil, err
		}
		if _, err := s.store.RunGet(ctx, id); err != nil {
			return nil, err
		}
		rows, err := s.store.EventList(ctx, id, after, in.Limit+1)
		if err != nil {
			return nil, err
		}
		out := &listOutput[Event]{}
		out.Body.Items = make([]Event, 0, len(rows))
		for i := range rows {
			if i == in.Limit {
				out.Body.NextCursor = encodeCursor("events", id.String(), rows[i-1].Seq)
				break
			}
			out.Body.Items = append(out.Body.Items, eventOf(&rows[i]))
		}
		return out, nil
	})

	register(s, huma.Operation{
		OperationID: "streamEvents",
		Method:      http.MethodGet,
		Path:        "/v1/runs/{id}/events/stream",
		Summary:     "Follow a run's events (server-sent events)",
		Description: "Replays the run's events after Last-Event-ID (or ?after=), then follows new ones live; the stream ends after the run's final event. Each SSE message has id = seq, event = type, data = the Event.",
		Tags:        []string{"runs"},
		Errors:      []int{http.StatusBadRequest, http.StatusNotFound},
		Responses: map[string]*huma.Response{"200": {Description: "A stream of events", Content: map[string]*huma.MediaType{
			"text/event-stream": {Schema: &huma.Schema{Type: "string"}},
		}}},
	}, RoleViewer, func(ctx context.Context, in *struct {
		RunIDParam
		LastEventID string `header:"Last-Event-ID" doc:"seq of the last event received; replay starts after it"`
		After       int64  `query:"after" minimum:"0" doc:"like Last-Event-ID, for clients that cannot set headers"`
	}) (*huma.StreamResponse, error) {
		id, err := in.uuid()
		if err != nil {
			return nil, err
		}
		after := in.After
		if in.LastEventID != "" {
			n, err := strconv.ParseInt(strings.TrimSpace(in.LastEventID), 10, 64)
			if err != nil || n < 0 {
				return nil, NewProblem(http.StatusBadRequest, "Last-Event-ID must be an event seq (a non-negative integer)")
			}
			after = n
		}
		if _, err := s.store.RunGet(ctx, id); err != nil {
			return nil, err
		}
		return &huma.StreamResponse{Body: func(hc huma.Context) {
			hc.SetHeader("Content-Type", "text/event-stream")
			hc.SetHeader("Cache-Control", "no-cache")
			hc.SetHeader("X-Accel-Buffering", "no")
			hc.SetStatus(http.StatusOK)
			s.followEvents(hc, id.String(), after)
		}}, nil
	})
}

// followEvents writes events after seq until the run's final event, the client
// leaving, or the server shutting down.
func (s *Server) followEvents(hc huma.Context, runID string, after int64) {
	ctx := hc.Context()
	w := hc.BodyWriter()
	flush := func() {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	_, _ = fmt.Fprint(w, ": stream of run "+runID+"\n\n")
	flush()
	id, _ := parseUUID(runID)
	ticker := time.NewTicker(ssePollInterval)
	defer ticker.Stop()
	keepalive := time.Now()
	for {
		rows, err := s.store.EventList(ctx, id, after, 500)
		if err != nil {
			if ctx.Err() == nil {
				s.logger.WarnContext(ctx, "event stream", "run_id", runID, "error", err)
			}
			return
		}
		for i := range rows {
			ev := eventOf(&rows[i])
			data, _ := json.Marshal(ev)
			if _, err := fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", ev.Seq, ev.Type, data); err != nil {
				return
			}
			after = ev.Seq
			if isFinal(ev.Type) {
				flush()
				return
			}
		}
		if len(rows) > 0 {
			flush()
			keepalive = time.Now()
			if len(rows) == 500 {
				continue
			}
		} else if run, err := s.store.RunGet(ctx, id); err == nil && isTerminalRun(run.Status) {
			// Everything up to the final event was sent before (Last-Event-ID).
			return
		} else if time.Since(keepalive) > 15*time.Second {
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
			flush()
			keepalive = time.Now()
		}
		select {
		case <-ctx.Done():
			return
		case <-s.streamsDone:
			return
		case <-ticker.C:
		}
	}
}
