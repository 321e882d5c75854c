package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/namespace"
)

// maxEventBody bounds POST /v1/events' body, read whole: data larger than the
// inline limit goes to the blob store, like a signal's.
const maxEventBody = 16 << 20

// EventBody is an event to receive.
type EventBody struct {
	Name string          `json:"name" pattern:"^[a-z0-9][a-z0-9_.-]*$" maxLength:"63" doc:"the event's name, as triggers:, wait_for_event and cancel_on name it"`
	ID   string          `json:"id,omitempty" minLength:"1" maxLength:"200" doc:"identifies the event: the same id again is the same event, received once (its first answer is returned); the same id with another name or data is a 409 idempotency_key_reused. Unset: a new id."`
	Data json.RawMessage `json:"data,omitempty" doc:"the event's JSON (null when unset); stored in the blob store when large"`
}

// EventAnswer is what an event did.
type EventAnswer struct {
	EventID    string                 `json:"event_id"`
	Name       string                 `json:"name"`
	ReceivedAt time.Time              `json:"received_at"`
	Duplicate  bool                   `json:"duplicate" doc:"the id was received before: nothing was done again; the rest is the first answer"`
	Started    []catalog.EventStarted `json:"started" doc:"the runs its triggers started"`
	Resumed    []catalog.EventResumed `json:"resumed" doc:"the wait_for_event steps it completed"`
	Canceled   []uuid.UUID            `json:"canceled" doc:"the runs its cancel_on, or a singleton trigger's cancel_other, canceled"`
	Flow       []catalog.EventFlow    `json:"flow,omitempty" doc:"what the flow control of the triggers it matched (singleton, debounce, batch) did with it: skipped (the key's unfinished run in run_id), canceled_other, queued, debounced or batched (the window in pending, its events so far, its due time); see docs/events.md"`
	Errors     []catalog.EventError   `json:"errors,omitempty" doc:"the expressions that failed on it, each blocking only its own trigger, wait or cancel_on"`
}

// ReceivedEvent is a received event.
type ReceivedEvent struct {
	EventAnswer
	Data  json.RawMessage `json:"data"`
	Actor string          `json:"actor"`
}

func eventAnswerOf(ev *catalog.ReceivedEvent, duplicate bool) EventAnswer {
	o := ev.Outcome
	return EventAnswer{EventID: eventIDOf(ev), Name: namespace.Strip(ev.Name), ReceivedAt: ev.ReceivedAt, Duplicate: duplicate,
		Started: nonNil(o.Started), Resumed: nonNil(o.Resumed), Canceled: nonNil(o.Canceled), Flow: o.Flow, Errors: o.Errors}
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func receivedEventOf(ev *catalog.ReceivedEvent) ReceivedEvent {
	return ReceivedEvent{EventAnswer: eventAnswerOf(ev, false), Data: json.RawMessage(ev.Data), Actor: ev.Actor}
}

// EventListParams filter GET /v1/events.
type EventListParams struct {
	Name  string    `query:"name" doc:"only events of this name"`
	Since time.Time `query:"since" doc:"only events received at or after this time (RFC 3339)"`
}

// receiveEvent receives an event (POST /v1/events, a hook's emit), begun at
// start: its data stored in the blob store when large (null when empty), then
// stored and applied by catalog.EventIngest, and counted.
func (s *Server) receiveEvent(ctx context.Context, start time.Time, p *catalog.EventIngestParams) (*catalog.ReceivedEvent, bool, error) {
	var err error
	if p.Name, p.ID, err = s.eventKeys(ctx, p.Name, p.ID); err != nil {
		return nil, false, err
	}
	if len(bytes.TrimSpace(p.Data)) == 0 {
		p.Data = json.RawMessage("null")
	} else if int64(len(p.Data)) > s.cfg.InlineLimit {
		stored, err := s.storeCheckpoint(ctx, bytes.NewReader(p.Data), "application/json")
		if err != nil {
			return nil, false, err
		}
		p.Data = stored
	}
	ev, dup, err := s.store.EventIngest(ctx, p)
	if err != nil {
		return nil, false, err
	}
	o := ev.Outcome
	s.metrics.eventReceived(start, dup, len(o.Started), len(o.Resumed), len(o.Canceled), len(o.Errors))
	return ev, dup, nil
}

func (s *Server) registerReceivedEvents() {
	register(s, huma.Operation{
		OperationID:   "sendEvent",
		Method:        http.MethodPost,
		Path:          "/v1/events",
		Summary:       "Send an event",
		Description:   "Stores an event and, in the same transaction, starts a run for every trigger of a workflow's latest version that matches it (`triggers:` in cairn.yaml: its event name and `if`), completes every `wait_for_event` step that waits for its name and whose `match` holds, and cancels every unfinished run whose version's `cancel_on` matches it. An event that no trigger, wait or cancel_on names is stored and does nothing. The same `id` again answers the first answer (duplicate true) and does nothing; with another name or data it is a 409 idempotency_key_reused. An expression that fails on the event is listed in `errors` and blocks only its own trigger, wait or cancel_on. A trigger with flow control (`singleton`, `debounce`, `batch`) may hold or refuse its start: `flow` says what it did. See docs/events.md.",
		Tags:          []string{"events"},
		DefaultStatus: http.StatusAccepted,
		MaxBodyBytes:  maxEventBody,
	}, RoleOperator, []problemClass{classIdempotencyReused, classPayloadTooLarge},
		func(ctx context.Context, in *struct{ Body EventBody }) (*struct{ Body EventAnswer }, error) {
			ev, dup, err := s.receiveEvent(ctx, time.Now(), &catalog.EventIngestParams{ID: in.Body.ID, Name: in.Body.Name,
				Data: in.Body.Data, Actor: actor(ctx)})
			if err != nil {
				return nil, err
			}
			return &struct{ Body EventAnswer }{Body: eventAnswerOf(ev, dup)}, nil
		})

	register(s, huma.Operation{
		OperationID: "getReceivedEvent",
		Method:      http.MethodGet,
		Path:        "/v1/events/{id}",
		Summary:     "Get a received event",
		Description: "A received event with its data and what it did: the runs it started, the steps it resumed, the runs it canceled, the expressions that failed on it.",
		Tags:        []string{"events"},
	}, RoleViewer, []problemClass{classNotFound}, func(ctx context.Context, in *struct {
		ID string `path:"id" maxLength:"200"`
	}) (*struct{ Body ReceivedEvent }, error) {
		ev, err := s.store.ReceivedEventGet(ctx, qualify(ctx, in.ID))
		if err == nil && namespace.Of(ev.Name) != requestNamespace(ctx) {
			err = withDetail(errNotFound, "event %q not found", in.ID) // default's id "ns/x" names ns's x
		}
		if err != nil {
			return nil, err
		}
		return &struct{ Body ReceivedEvent }{Body: receivedEventOf(ev)}, nil
	})

	register(s, huma.Operation{
		OperationID: "listReceivedEvents",
		Method:      http.MethodGet,
		Path:        "/v1/events",
		Summary:     "List received events",
		Description: "Received events, newest first, keyset-paginated.",
		Tags:        []string{"events"},
	}, RoleViewer, []problemClass{classInvalidCursor}, func(ctx context.Context, in *struct {
		EventListParams
		PageParams
	}) (*listOutput[ReceivedEvent], error) {
		var before int64
		if err := s.decodeCursor(in.Cursor, "events", in.Name, &before); err != nil {
			return nil, err
		}
		rows, err := s.store.ReceivedEventList(ctx, catalog.ReceivedEventListParams{Name: qualify(ctx, in.Name), Since: in.Since,
			Before: before, Limit: in.Limit + 1, Namespace: requestNamespace(ctx)})
		if err != nil {
			return nil, err
		}
		out := &listOutput[ReceivedEvent]{}
		out.Body.Items = make([]ReceivedEvent, 0, len(rows))
		for i := range rows {
			if i == in.Limit {
				out.Body.NextCursor = s.encodeCursor("events", in.Name, rows[i-1].Seq)
				break
			}
			out.Body.Items = append(out.Body.Items, receivedEventOf(&rows[i]))
		}
		return out, nil
	})
}
