package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/catalog/catalogtest"
)

// makeRun creates a run of a three-step chain directly in the catalog.
func (tb *testBundle) makeRun(t *testing.T) uuid.UUID {
	t.Helper()
	v := catalogtest.Version(t, tb.store, "wf",
		catalog.NewStep{Key: "a", MaxAttempts: 2}, catalog.NewStep{Key: "b", Needs: []string{"a"}, MaxAttempts: 2},
		catalog.NewStep{Key: "c", Needs: []string{"b"}, MaxAttempts: 2})
	run, _, err := tb.store.RunCreate(context.Background(), &catalog.RunCreateParams{Workflow: "wf", Version: v.Version})
	require.NoError(t, err)
	return run.ID
}

// advance claims and finishes every ready step once (the first attempt of each
// fails retryably, so there are more events); it reports whether work was done.
func (tb *testBundle) advance(t *testing.T) bool {
	t.Helper()
	ctx := context.Background()
	claimed, err := tb.store.StepClaim(ctx, "test", 10, time.Minute)
	require.NoError(t, err)
	for _, c := range claimed {
		p := &catalog.StepFinishParams{RunID: c.RunID, Key: c.Key, LeaseToken: c.LeaseToken, Outcome: catalog.OutcomeSucceeded, Output: json.RawMessage(`1`)}
		if c.Attempt == 1 {
			p = &catalog.StepFinishParams{RunID: c.RunID, Key: c.Key, LeaseToken: c.LeaseToken, Outcome: catalog.OutcomeFailed, Retryable: true, Error: json.RawMessage(`{"message":"first"}`)}
		}
		require.NoError(t, tb.store.StepFinish(ctx, p))
	}
	return len(claimed) > 0
}

type sseEvent struct {
	id  int64
	typ string
}

// stream reads the SSE stream of a run after lastID until it ends.
func (tb *testBundle) stream(t *testing.T, id uuid.UUID, lastID string) []sseEvent {
	t.Helper()
	events, err := tb.readStream(id, lastID)
	require.NoError(t, err)
	return events
}

// readStream is stream for another goroutine than the test's: it returns what went
// wrong.
func (tb *testBundle) readStream(id uuid.UUID, lastID string) ([]sseEvent, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, tb.url+"/v1/runs/"+id.String()+"/events/stream", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+operatorToken)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d, want 200", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		return nil, fmt.Errorf("Content-Type %q, want text/event-stream", ct)
	}
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "id: "):
			cur.id, err = strconv.ParseInt(strings.TrimPrefix(line, "id: "), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("line %q: %w", line, err)
			}
		case strings.HasPrefix(line, "event: "):
			cur.typ = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var ev struct {
				Seq  int64  `json:"seq"`
				Type string `json:"type"`
			}
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev); err != nil {
				return nil, fmt.Errorf("line %q: %w", line, err)
			}
			if ev.Seq != cur.id || ev.Type != cur.typ {
				return nil, fmt.Errorf("data of event %d (%s) is event %d (%s)", cur.id, cur.typ, ev.Seq, ev.Type)
			}
		case line == "" && cur.id != 0:
			out = append(out, cur)
			cur = sseEvent{}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("the stream does not end cleanly after the final event: %w", err)
	}
	return out, nil
}

func TestEventStreamReplaysWithoutGapsOrDuplicates(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	id := tb.makeRun(t)
	for tb.advance(t) {
	}
	run, err := tb.store.RunGet(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, catalog.RunSucceeded, run.Status)
	total := run.Revision

	for last := int64(0); last <= total; last++ {
		lastID := strconv.FormatInt(last, 10)
		if last == 0 {
			lastID = ""
		}
		events := tb.stream(t, id, lastID)
		require.Len(t, events, int(total-last), "after %d", last)
		for i, e := range events {
			require.Equal(t, last+int64(i)+1, e.id, "after %d: event %d", last, i)
		}
		if len(events) > 0 {
			require.Equal(t, "run.succeeded", events[len(events)-1].typ)
		}
	}
}

func TestEventStreamFollowsLive(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	id := tb.makeRun(t)
	type streamed struct {
		events []sseEvent
		err    error
	}
	done := make(chan streamed, 1)
	go func() {
		events, err := tb.readStream(id, "")
		done <- streamed{events, err}
	}()
	// The stream follows while the run progresses, then ends after the final event.
	for tb.advance(t) {
		time.Sleep(20 * time.Millisecond) // spread the events over several polls
	}
	res := <-done
	require.NoError(t, res.err)
	events := res.events
	require.NotEmpty(t, events)
	for i, e := range events {
		require.Equal(t, int64(i+1), e.id)
	}
	require.Equal(t, "run.created", events[0].typ)
	require.Equal(t, "run.succeeded", events[len(events)-1].typ)

	// Paged history agrees.
	req, _ := http.NewRequest(http.MethodGet, tb.url+"/v1/runs/"+id.String()+"/events?limit=4", nil)
	req.Header.Set("Authorization", "Bearer "+operatorToken)
	var seqs []int64
	for {
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		var page struct {
			Items      []struct{ Seq int64 } `json:"items"`
			NextCursor string                `json:"next_cursor"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&page))
		resp.Body.Close()
		for _, it := range page.Items {
			seqs = append(seqs, it.Seq)
		}
		if page.NextCursor == "" {
			break
		}
		req, _ = http.NewRequest(http.MethodGet, tb.url+"/v1/runs/"+id.String()+"/events?limit=4&cursor="+page.NextCursor, nil)
		req.Header.Set("Authorization", "Bearer "+operatorToken)
	}
	require.Len(t, seqs, len(events))

	// A cursor from another run's list is refused.
	other := tb.makeRunNamed(t)
	resp, err := http.DefaultClient.Do(func() *http.Request {
		r, _ := http.NewRequest(http.MethodGet, tb.url+"/v1/runs/"+other.String()+"/events?limit=4&cursor="+firstCursor(t, tb, id), nil)
		r.Header.Set("Authorization", "Bearer "+operatorToken)
		return r
	}())
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
}

func (tb *testBundle) makeRunNamed(t *testing.T) uuid.UUID {
	t.Helper()
	v := catalogtest.Version(t, tb.store, "wf", catalog.NewStep{Key: "a", MaxAttempts: 1})
	run, _, err := tb.store.RunCreate(context.Background(), &catalog.RunCreateParams{Workflow: "wf", Version: v.Version})
	require.NoError(t, err)
	return run.ID
}

func firstCursor(t *testing.T, tb *testBundle, id uuid.UUID) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, tb.url+"/v1/runs/"+id.String()+"/events?limit=1", nil)
	req.Header.Set("Authorization", "Bearer "+operatorToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var page struct {
		NextCursor string `json:"next_cursor"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&page))
	require.NotEmpty(t, page.NextCursor)
	return page.NextCursor
}
