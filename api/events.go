package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"
	"golang.org/x/sync/singleflight"

	"github.com/cairnrun/cairn/catalog"
)

// Event is an entry of a run's history. Seq numbers a run's events 1, 2, 3, … in
// commit order, without gaps; it is the SSE event ID.
type Event struct {
	Seq       int64           `json:"seq"`
	Type      string          `json:"type" doc:"run.created, step.started, step.succeeded, step.retrying, step.failed, step.skipped, step.checkpointed, step.progress, step.handed_back, step.reused, step.suspended, step.resumed, signal.received, run.retried, run.paused, run.resumed, run.compensating, run.succeeded, run.failed, run.canceled"`
	Step      string          `json:"step,omitempty"`
	Attempt   int             `json:"attempt,omitempty"`
	Data      json.RawMessage `json:"data"`
	CreatedAt time.Time       `json:"created_at"`
}

func eventOf(e *catalog.Event) Event {
	return Event{Seq: e.Seq, Type: string(e.Type), Step: e.StepKey, Attempt: e.Attempt, Data: jsonOrNull(e.Data), CreatedAt: e.CreatedAt.UTC()}
}

// ssePollInterval is how often a live stream looks for new events (see pollEvents).
const ssePollInterval = 100 * time.Millisecond

func (s *Server) registerEvents() {
	register(s, huma.Operation{
		OperationID: "listEvents",
		Method:      http.MethodGet,
		Path:        "/v1/runs/{id}/events",
		Summary:     "List a run's events",
		Description: "The run's history in order, keyset-paginated.",
		Tags:        []string{"runs"},
	}, RoleViewer, []problemClass{classBadRequest, classInvalidCursor, classNotFound}, func(ctx context.Context, in *struct {
		RunIDParam
		PageParams
	}) (*listOutput[Event], error) {
		id, err := in.uuid()
		if err != nil {
			return nil, err
		}
		var after int64
		if err := s.decodeCursor(in.Cursor, "events", id.String(), &after); err != nil {
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
				out.Body.NextCursor = s.encodeCursor("events", id.String(), rows[i-1].Seq)
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
		Description: "Replays the run's events after Last-Event-ID (or ?after=), then follows new ones live; the stream ends after the run's final event (a retried run's stream goes past the final event before its retry, to the last). Each SSE message has id = seq, event = type, data = the Event. A server keeps a bounded number of streams open (CAIRN_MAX_STREAMS): over it, 503 with Retry-After.",
		Tags:        []string{"runs"},
		Responses: map[string]*huma.Response{"200": {Description: "A stream of events", Content: map[string]*huma.MediaType{
			"text/event-stream": {Schema: &huma.Schema{Type: "string"}},
		}}},
	}, RoleViewer, []problemClass{classBadRequest, classNotFound, classUnavailable}, func(ctx context.Context, in *struct {
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
				return nil, withDetail(errBadRequest, "Last-Event-ID must be an event seq (a non-negative integer)")
			}
			after = n
		}
		if _, err := s.store.RunGet(ctx, id); err != nil {
			return nil, err
		}
		release, err := s.acquireStream()
		if err != nil {
			return nil, err
		}
		return &huma.StreamResponse{Body: func(hc huma.Context) {
			defer release()
			hc.SetHeader("Content-Type", "text/event-stream")
			hc.SetHeader("Cache-Control", "no-cache")
			hc.SetHeader("X-Accel-Buffering", "no")
			hc.SetStatus(http.StatusOK)
			s.followEvents(hc, id, after)
		}}, nil
	})
}

// streamRetryAfter is the Retry-After, in seconds, of a stream refused at the cap:
// streams last as long as runs, so room comes back slowly.
const streamRetryAfter = 10

// errStreamsFull means the server has its maximum of open event streams (a 503 with
// Retry-After streamRetryAfter).
var errStreamsFull = errors.New("too many event streams")

// acquireStream takes one of the MaxStreams slots, or fails with errStreamsFull. The
// returned release gives it back; it is safe to call more than once.
func (s *Server) acquireStream() (release func(), err error) {
	select {
	case s.streams <- struct{}{}:
	default:
		s.metrics.refused("streams")
		return nil, withDetail(errStreamsFull, "the server has its maximum of %d open event streams; try again later, or poll GET /v1/runs/{id}/events", cap(s.streams))
	}
	s.metrics.addStreams(1)
	var once sync.Once
	return func() {
		once.Do(func() {
			<-s.streams
			s.metrics.addStreams(-1)
		})
	}, nil
}

// followEvents writes events after seq until the run's final event (the last of a
// run that ended: a retry makes another), the client leaving, or the server
// shutting down.
func (s *Server) followEvents(hc huma.Context, id uuid.UUID, after int64) {
	ctx := hc.Context()
	w := hc.BodyWriter()
	flush := func() {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	_, _ = fmt.Fprint(w, ": stream of run "+id.String()+"\n\n")
	flush()
	s.pulse.join()
	defer s.pulse.leave()
	keepalive := time.Now()
	for {
		tick, gen := s.pulse.next()
		rows, err := s.pollEvents(ctx, gen, id, after)
		if err != nil {
			if ctx.Err() == nil {
				s.logger.WarnContext(ctx, "event stream", "run_id", id.String(), "error", err)
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
			if rows[i].Type.Final() && i == len(rows)-1 && s.endsHistory(ctx, gen, id, ev.Seq) {
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
		} else if run, err := s.pollRun(ctx, gen, id); err == nil && run.Status.Terminal() {
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
		case <-tick:
		}
	}
}

// endsHistory reports whether the final event seq is the run's last: a retried run
// (POST …/retry) has a run.failed or run.canceled followed by run.retried and more,
// and its stream goes on to its next final event.
func (s *Server) endsHistory(ctx context.Context, gen uint64, id uuid.UUID, seq int64) bool {
	run, err := s.pollRun(ctx, gen, id)
	return err == nil && run.Status.Terminal() && run.Revision == seq
}

// pollTimeout bounds a poll shared by several streams (no one stream's context
// governs it).
const pollTimeout = 10 * time.Second

// pollEvents is EventList(id, after, 500) shared by the streams that ask for it in
// the same pulse generation gen. Streams wake on one pulse, so the streams of one run
// that are caught up (at the same seq) cost one query per pulse, not one each
// (2,000 streams once made 20,000 queries a second), even when a busy machine spreads their
// wake-ups over the interval. A caller whose ctx ends stops waiting; the rows are
// shared and must not be modified.
func (s *Server) pollEvents(ctx context.Context, gen uint64, id uuid.UUID, after int64) ([]catalog.Event, error) {
	v, err := s.polls.do(ctx, gen, fmt.Sprintf("events/%s/%d", id, after), func(ctx context.Context) (any, error) {
		return s.store.EventList(ctx, id, after, 500)
	})
	if err != nil {
		return nil, err
	}
	return v.([]catalog.Event), nil
}

// pollRun is RunGet(id) shared like pollEvents.
func (s *Server) pollRun(ctx context.Context, gen uint64, id uuid.UUID) (*catalog.Run, error) {
	v, err := s.polls.do(ctx, gen, "run/"+id.String(), func(ctx context.Context) (any, error) {
		return s.store.RunGet(ctx, id)
	})
	if err != nil {
		return nil, err
	}
	return v.(*catalog.Run), nil
}

// sharedPolls runs each poll of a pulse generation once: callers that ask while
// it runs wait for it (singleflight), and callers that ask later in the same
// generation get its result. Errors are not kept. It is safe for concurrent use.
type sharedPolls struct {
	group singleflight.Group
	mu    sync.Mutex
	gen   uint64         // the generation vals belong to
	vals  map[string]any // results of generation gen
}

func (p *sharedPolls) do(ctx context.Context, gen uint64, key string, query func(context.Context) (any, error)) (any, error) {
	p.mu.Lock()
	if p.vals == nil || p.gen != gen {
		p.gen, p.vals = gen, map[string]any{}
	}
	v, ok := p.vals[key]
	p.mu.Unlock()
	if ok {
		return v, nil
	}
	ch := p.group.DoChan(fmt.Sprintf("%d/%s", gen, key), func() (any, error) {
		qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pollTimeout)
		defer cancel()
		v, err := query(qctx)
		if err == nil {
			p.mu.Lock()
			if p.gen == gen {
				p.vals[key] = v
			}
			p.mu.Unlock()
		}
		return v, err
	})
	select {
	case res := <-ch:
		return res.Val, res.Err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// pulse closes its channel every interval while streams use it, and replaces it:
// every stream waits for the same pulse, so their polls line up and coalesce. Its
// goroutine runs only while there are users. It is safe for concurrent use.
type pulse struct {
	interval time.Duration
	mu       sync.Mutex
	ch       chan struct{}
	gen      uint64 // pulses so far
	users    int
	running  bool
}

func newPulse(interval time.Duration) *pulse {
	return &pulse{interval: interval, ch: make(chan struct{})}
}

func (p *pulse) join() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.users++
	if !p.running {
		p.running = true
		go p.run()
	}
}

func (p *pulse) leave() {
	p.mu.Lock()
	p.users--
	p.mu.Unlock()
}

// next returns the channel closed at the next pulse, and the number of pulses so
// far: the generation a poll made now belongs to.
func (p *pulse) next() (<-chan struct{}, uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ch, p.gen
}

func (p *pulse) run() {
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for range t.C {
		p.mu.Lock()
		close(p.ch)
		p.ch = make(chan struct{})
		p.gen++
		if p.users == 0 {
			p.running = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
}
