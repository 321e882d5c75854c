package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/client"
)

// fakeStream is a server whose event stream answers are scripted per connection,
// for the cases a real server does not make on demand (a gap, a stall, CRLF lines).
type fakeStream struct {
	id uuid.UUID
	// conns writes connection n (0-based) of the stream; past the script, the
	// last entry is used.
	conns []func(w http.ResponseWriter, r *http.Request)
	// run is the JSON of GET /v1/runs/{id}.
	run string
	// url is the server's, once started.
	url string

	mu          sync.Mutex
	lastEventID []string
}

func (f *fakeStream) start(t *testing.T) *client.Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/runs/"+f.id.String()+"/events/stream" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, f.run)
			return
		}
		f.mu.Lock()
		n := len(f.lastEventID)
		f.lastEventID = append(f.lastEventID, r.Header.Get("Last-Event-ID"))
		f.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		f.conns[min(n, len(f.conns)-1)](w, r)
	}))
	t.Cleanup(srv.Close)
	f.url = srv.URL
	cl, err := client.New(srv.URL, "token")
	require.NoError(t, err)
	return cl
}

func (f *fakeStream) lastEventIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.lastEventID...)
}

// sseEvent writes an event as the server does, with newline as the line end.
func sseEvent(w io.Writer, seq int, typ, newline string) {
	data := fmt.Sprintf(`{"seq":%d,"type":%q,"data":{},"created_at":"2026-01-01T00:00:00Z"}`, seq, typ)
	fmt.Fprintf(w, "id: %d%sevent: %s%sdata: %s%s%s", seq, newline, typ, newline, data, newline, newline)
}

func runJSON(id uuid.UUID, status string, revision int) string {
	return fmt.Sprintf(`{"id":%q,"workflow":"w","version":1,"status":%q,"revision":%d,"created_at":"2026-01-01T00:00:00Z"}`, id, status, revision)
}

// followTypes follows f's run from after and returns the types of the events.
func followTypes(t *testing.T, cl *client.Client, id uuid.UUID, after int64, opts client.FollowOptions) ([]string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var got []string
	err := cl.FollowRun(ctx, id, after, func(ev *client.Event) error {
		got = append(got, fmt.Sprintf("%d %s", ev.Seq, ev.Type))
		return nil
	}, opts)
	return got, err
}

var fast = client.FollowOptions{MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}

func TestFollowRunScripted(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		after int64
		conns []func(w http.ResponseWriter, r *http.Request)
		run   string // status and revision for GET run: "running 3"
		opts  client.FollowOptions

		want        []string
		wantLastIDs []string
		wantErr     string
	}{
		{
			name: "a dropped stream resumes after the last event; a replayed one is skipped",
			conns: []func(http.ResponseWriter, *http.Request){
				func(w http.ResponseWriter, _ *http.Request) {
					fmt.Fprint(w, ": stream\n\n")
					sseEvent(w, 1, "run.created", "\n")
					sseEvent(w, 2, "step.started", "\n")
				},
				func(w http.ResponseWriter, _ *http.Request) {
					sseEvent(w, 2, "step.started", "\n")
					sseEvent(w, 3, "run.succeeded", "\n")
				},
			},
			run:         "running 2",
			want:        []string{"1 run.created", "2 step.started", "3 run.succeeded"},
			wantLastIDs: []string{"", "2"},
		},
		{
			name:  "CRLF lines, from after",
			after: 4,
			conns: []func(http.ResponseWriter, *http.Request){
				func(w http.ResponseWriter, _ *http.Request) {
					fmt.Fprint(w, ": stream\r\n\r\n")
					sseEvent(w, 5, "step.succeeded", "\r\n")
					sseEvent(w, 6, "run.failed", "\r\n")
				},
			},
			want:        []string{"5 step.succeeded", "6 run.failed"},
			wantLastIDs: []string{"4"},
		},
		{
			name: "a gap reopens the stream after the last event rather than skip one",
			conns: []func(http.ResponseWriter, *http.Request){
				func(w http.ResponseWriter, _ *http.Request) {
					sseEvent(w, 1, "run.created", "\n")
					sseEvent(w, 3, "step.succeeded", "\n")
				},
				func(w http.ResponseWriter, _ *http.Request) {
					sseEvent(w, 2, "step.started", "\n")
					sseEvent(w, 3, "step.succeeded", "\n")
					sseEvent(w, 4, "run.succeeded", "\n")
				},
			},
			want:        []string{"1 run.created", "2 step.started", "3 step.succeeded", "4 run.succeeded"},
			wantLastIDs: []string{"", "1"},
		},
		{
			name: "an event cut short by the drop is read again",
			conns: []func(http.ResponseWriter, *http.Request){
				func(w http.ResponseWriter, _ *http.Request) {
					sseEvent(w, 1, "run.created", "\n")
					fmt.Fprint(w, "id: 2\nevent: step.started\ndata: {\"seq\":2,")
				},
				func(w http.ResponseWriter, _ *http.Request) {
					sseEvent(w, 2, "step.started", "\n")
					sseEvent(w, 3, "run.canceled", "\n")
				},
			},
			run:         "running 2",
			want:        []string{"1 run.created", "2 step.started", "3 run.canceled"},
			wantLastIDs: []string{"", "1"},
		},
		{
			name: "a stalled stream is dropped after IdleTimeout and reopened",
			conns: []func(http.ResponseWriter, *http.Request){
				func(w http.ResponseWriter, r *http.Request) {
					sseEvent(w, 1, "run.created", "\n")
					w.(http.Flusher).Flush()
					<-r.Context().Done() // silent until the client hangs up
				},
				func(w http.ResponseWriter, _ *http.Request) {
					sseEvent(w, 2, "run.succeeded", "\n")
				},
			},
			opts:        client.FollowOptions{MinBackoff: 10 * time.Millisecond, IdleTimeout: 200 * time.Millisecond},
			want:        []string{"1 run.created", "2 run.succeeded"},
			wantLastIDs: []string{"", "1"},
		},
		{
			name:  "a run that ended before: the stream ends at once, and so does following",
			after: 7,
			conns: []func(http.ResponseWriter, *http.Request){
				func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, ": stream\n\n") },
			},
			run:         "succeeded 7",
			wantLastIDs: []string{"7"},
		},
		{
			name: "a stream that ends before an ended run's last event is reopened",
			conns: []func(http.ResponseWriter, *http.Request){
				func(w http.ResponseWriter, _ *http.Request) { sseEvent(w, 1, "run.created", "\n") },
				func(w http.ResponseWriter, _ *http.Request) { sseEvent(w, 2, "run.succeeded", "\n") },
			},
			run:         "succeeded 2",
			want:        []string{"1 run.created", "2 run.succeeded"},
			wantLastIDs: []string{"", "1"},
		},
		{
			name: "a refusal (404) is not tried again",
			conns: []func(http.ResponseWriter, *http.Request){
				func(w http.ResponseWriter, _ *http.Request) {
					w.Header().Set("Content-Type", "application/problem+json")
					w.WriteHeader(http.StatusNotFound)
					fmt.Fprint(w, `{"type":"urn:cairn:problem:not_found","title":"Not Found","status":404,"code":"not_found","detail":"no such run"}`)
				},
			},
			wantLastIDs: []string{""},
			wantErr:     "not_found (HTTP 404): no such run",
		},
		{
			name: "after MaxFailures failures in a row, it gives up",
			conns: []func(http.ResponseWriter, *http.Request){
				func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "down", http.StatusBadGateway) },
			},
			opts:        client.FollowOptions{MinBackoff: time.Millisecond, MaxFailures: 3},
			wantLastIDs: []string{"", "", ""},
			wantErr:     "the event stream failed 3 times in a row: http_502 (HTTP 502): down",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &fakeStream{id: uuid.New(), conns: tt.conns}
			status, revision := "running", 0
			if tt.run != "" {
				_, err := fmt.Sscanf(tt.run, "%s %d", &status, &revision)
				require.NoError(t, err)
			}
			f.run = runJSON(f.id, status, revision)
			opts := tt.opts
			if opts == (client.FollowOptions{}) {
				opts = fast
			}
			got, err := followTypes(t, f.start(t), f.id, tt.after, opts)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tt.want, got)
			require.Equal(t, tt.wantLastIDs, f.lastEventIDs())
		})
	}
}

func TestRetryable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{name: "nil", err: nil, want: false},
		{name: "network", err: errors.New("connection refused"), want: true},
		{name: "503", err: &client.Problem{Status: 503, Code: "unavailable"}, want: true},
		{name: "429", err: fmt.Errorf("x: %w", &client.Problem{Status: 429}), want: true},
		{name: "404", err: &client.Problem{Status: 404, Code: "not_found"}, want: false},
		{name: "403", err: &client.Problem{Status: 403}, want: false},
		{name: "canceled", err: fmt.Errorf("get: %w", context.Canceled), want: false},
		{name: "deadline", err: context.DeadlineExceeded, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, client.Retryable(tt.err))
		})
	}
}

// TestPagesEndOnRepeatedCursor: a server that hands back the cursor it was given
// does not make the loop endless.
func TestPagesEndOnRepeatedCursor(t *testing.T) {
	t.Parallel()
	var calls int
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"items":[{"name":"w%s","latest_version":1,"created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z"}],"next_cursor":"same"}`,
			strings.TrimSpace(r.URL.Query().Get("cursor")))
	}))
	t.Cleanup(srv.Close)
	cl, err := client.New(srv.URL, "token")
	require.NoError(t, err)
	var names []string
	for w, err := range cl.Workflows(t.Context(), nil) {
		require.NoError(t, err)
		names = append(names, w.Name)
	}
	require.Equal(t, []string{"w", "wsame"}, names)
	require.Equal(t, 2, calls)
}

// TestFollowRunClientNotMadeByNew: a Client built around the generated client
// (without New's error handling) follows too, and its error answers are *Problem.
func TestFollowRunClientNotMadeByNew(t *testing.T) {
	t.Parallel()
	notFound := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"type":"urn:cairn:problem:not_found","title":"Not Found","status":404,"code":"not_found"}`)
	}
	f := &fakeStream{id: uuid.New(), conns: []func(http.ResponseWriter, *http.Request){
		func(w http.ResponseWriter, _ *http.Request) {
			sseEvent(w, 1, "run.created", "\n")
			sseEvent(w, 2, "run.succeeded", "\n")
		},
		notFound,
	}}
	f.run = runJSON(f.id, "running", 0)
	f.start(t)
	gen, err := client.NewClientWithResponses(f.url)
	require.NoError(t, err)
	cl := &client.Client{ClientWithResponses: gen}

	got, err := followTypes(t, cl, f.id, 0, fast)
	require.NoError(t, err)
	require.Equal(t, []string{"1 run.created", "2 run.succeeded"}, got)

	err = cl.FollowRun(t.Context(), f.id, 0, func(*client.Event) error { return nil }, fast)
	var p *client.Problem
	require.ErrorAs(t, err, &p)
	require.EqualValues(t, http.StatusNotFound, p.Status)
}
