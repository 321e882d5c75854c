package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/client"
)

// The tests of start-time flow control (docs/events.md, "Flow control"), through
// the real binary: each one leaves state mid-window (a singleton key's run, a
// queue, a debounce or a batch window), kills the server with SIGKILL, starts
// servers again and checks that exactly the right runs exist, with the right
// input: nothing lost, nothing twice.

// flowAnswer is the part of POST /v1/events' answer (and GET /v1/events/{id}'s)
// these tests read, decoded from its JSON.
type flowAnswer struct {
	Started []struct {
		RunID string `json:"run_id"`
	} `json:"started"`
	Canceled []string `json:"canceled"`
	Flow     []struct {
		Kind    string `json:"kind"`
		Action  string `json:"action"`
		Key     string `json:"key"`
		RunID   string `json:"run_id"`
		Pending int64  `json:"pending"`
		Events  int    `json:"events"`
	} `json:"flow"`
	Errors []any `json:"errors"`
}

// sendFlow posts event name with id and data.
func (c *apiClient) sendFlow(name, id string, data any) flowAnswer {
	c.t.Helper()
	ctx, cancel := withTimeout(30 * time.Second)
	defer cancel()
	resp, err := c.cl.SendEventWithResponse(ctx, client.EventBody{Name: name, Id: &id, Data: data})
	require.NoError(c.t, err)
	require.Equal(c.t, 202, resp.StatusCode(), "send %s: %s", id, resp.Body)
	var a flowAnswer
	require.NoError(c.t, json.Unmarshal(resp.Body, &a))
	require.Empty(c.t, a.Errors, "send %s", id)
	return a
}

// receivedEvent is GET /v1/events/{id}.
func (c *apiClient) receivedEvent(id string) flowAnswer {
	c.t.Helper()
	ctx, cancel := withTimeout(30 * time.Second)
	defer cancel()
	resp, err := c.cl.GetReceivedEventWithResponse(ctx, id)
	require.NoError(c.t, err)
	require.Equal(c.t, 200, resp.StatusCode(), "get %s: %s", id, resp.Body)
	var a flowAnswer
	require.NoError(c.t, json.Unmarshal(resp.Body, &a))
	return a
}

// flowRun is a run of a flow test: its ID, status and input (JSON).
type flowRun struct {
	ID     string
	Status client.RunStatus
	Input  string
}

// listRuns lists the runs of workflow, oldest first (no require: it is called from
// EventuallyWithT's goroutine).
func (c *apiClient) listRuns(workflow string) ([]flowRun, error) {
	ctx, cancel := withTimeout(30 * time.Second)
	defer cancel()
	limit := int64(1000)
	var runs []client.Run
	for r, err := range c.cl.Runs(ctx, &client.ListRunsParams{Workflow: &workflow, Limit: &limit}) {
		if err != nil {
			return nil, err
		}
		runs = append(runs, r)
	}
	sort.Slice(runs, func(i, j int) bool {
		if !runs[i].CreatedAt.Equal(runs[j].CreatedAt) {
			return runs[i].CreatedAt.Before(runs[j].CreatedAt)
		}
		return runs[i].Id < runs[j].Id // UUIDv7: in creation order
	})
	out := make([]flowRun, len(runs))
	for i, r := range runs {
		out[i] = flowRun{ID: r.Id, Status: r.Status, Input: string(jsonOf(r.Input))}
	}
	return out, nil
}

// waitRuns waits until workflow has n runs and returns them.
func (c *apiClient) waitRuns(workflow string, n int, timeout time.Duration) []flowRun {
	c.t.Helper()
	var runs []flowRun
	// Waiting for the runs the flow control holds back to start.
	require.EventuallyWithT(c.t, func(t *assert.CollectT) {
		var err error
		runs, err = c.listRuns(workflow)
		if assert.NoError(t, err) {
			assert.GreaterOrEqual(t, len(runs), n, "runs of %s", workflow)
		}
	}, timeout, 100*time.Millisecond)
	return runs
}

// cancelRun cancels run id.
func (c *apiClient) cancelRun(id string) {
	c.t.Helper()
	ctx, cancel := withTimeout(30 * time.Second)
	defer cancel()
	resp, err := c.cl.CancelRunWithResponse(ctx, c.runID(id), client.CancelRunRequest{})
	require.NoError(c.t, err)
	require.Less(c.t, resp.StatusCode(), 300, "cancel %s: %s", id, resp.Body)
}

// pendingStarts counts the rows of held starts left in the catalog (windows and
// queued starts): 0 means no run can start later.
func (st *stack) pendingStarts() int {
	st.t.Helper()
	db, err := sql.Open("postgres", st.dbURL)
	require.NoError(st.t, err)
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var n int
	require.NoError(st.t, db.QueryRowContext(ctx, `SELECT count(*) FROM event_flow_pending`).Scan(&n))
	return n
}

// holdManifest is a workflow started by event name under trigger options flow,
// whose run waits for signal done (it stays unfinished until told).
func holdManifest(workflow, name, flow string) map[string]string {
	return map[string]string{"cairn.yaml": fmt.Sprintf(`name: %s
triggers:
  - {event: %s, %s}
steps:
  - {key: hold, signal: {name: done}}
`, workflow, name, flow)}
}

// inputsOf are the runs' inputs.
func inputsOf(runs []flowRun) []string {
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = r.Input
	}
	return out
}

// TestEventSingletonSkipCrash: a singleton key's run outlives a SIGKILL of the
// server and still keeps its key: the next event of the key is skipped, naming the
// key and the run, in its answer and in GET /v1/events/{id}; once the run has
// ended, the key's next event starts one.
func TestEventSingletonSkipCrash(t *testing.T) {
	t.Parallel()
	st := newStack(t, stackOptions{})
	s := st.start(serverOptions{})
	c := s.api()
	c.deploy(holdManifest("sync", "doc.changed", `singleton: {key: "event.data.doc", mode: skip}`))

	first := c.sendFlow("doc.changed", "e1", map[string]any{"doc": "a", "n": 1})
	require.Len(t, first.Started, 1)
	r1 := first.Started[0].RunID
	s.kill()
	c = st.start(serverOptions{}).api()

	for _, a := range []flowAnswer{c.sendFlow("doc.changed", "e2", map[string]any{"doc": "a", "n": 2}), c.receivedEvent("e2")} {
		require.Empty(t, a.Started)
		require.Len(t, a.Flow, 1)
		require.Equal(t, "skipped", a.Flow[0].Action)
		require.Equal(t, "a", a.Flow[0].Key)
		require.Equal(t, r1, a.Flow[0].RunID)
	}
	c.cancelRun(r1)
	require.Len(t, c.sendFlow("doc.changed", "e3", map[string]any{"doc": "a", "n": 3}).Started, 1)
	runs, err := c.listRuns("sync")
	require.NoError(t, err)
	require.Equal(t, []string{`{"doc":"a","n":1}`, `{"doc":"a","n":3}`}, inputsOf(runs))
}

// TestEventSingletonCancelOtherCrash: after a SIGKILL, the key's next event
// cancels the key's run (its reason names the event) and starts its own.
func TestEventSingletonCancelOtherCrash(t *testing.T) {
	t.Parallel()
	st := newStack(t, stackOptions{})
	s := st.start(serverOptions{})
	c := s.api()
	c.deploy(holdManifest("sync", "doc.changed", `singleton: {key: "event.data.doc", mode: cancel_other}`))

	r1 := c.sendFlow("doc.changed", "e1", map[string]any{"doc": "a", "n": 1}).Started[0].RunID
	s.kill()
	c = st.start(serverOptions{}).api()

	a := c.sendFlow("doc.changed", "e2", map[string]any{"doc": "a", "n": 2})
	require.Len(t, a.Started, 1)
	require.Equal(t, []string{r1}, a.Canceled)
	require.Equal(t, "canceled_other", a.Flow[0].Action)
	run, err := c.run(r1)
	require.NoError(t, err)
	require.Equal(t, client.RunStatusCanceled, run.Status)
	require.Contains(t, errorOf(run.Error).Message, "canceled by event doc.changed (e2)")
	runs, err := c.listRuns("sync")
	require.NoError(t, err)
	require.Len(t, runs, 2)
	require.Equal(t, a.Started[0].RunID, runs[1].ID)
	require.NotEqual(t, client.RunStatusCanceled, runs[1].Status)
}

// TestEventSingletonQueueCrash: events queued behind a singleton key's run
// survive a SIGKILL; once the run ends, the flow firer of the new servers starts
// them one at a time, in arrival order, each once.
func TestEventSingletonQueueCrash(t *testing.T) {
	t.Parallel()
	st := newStack(t, stackOptions{})
	s := st.start(serverOptions{})
	c := s.api()
	c.deploy(holdManifest("sync", "doc.changed", `singleton: {key: "event.data.doc", mode: queue}`))

	r1 := c.sendFlow("doc.changed", "e1", map[string]any{"doc": "a", "n": 1}).Started[0].RunID
	for i := 2; i <= 3; i++ {
		a := c.sendFlow("doc.changed", fmt.Sprintf("e%d", i), map[string]any{"doc": "a", "n": i})
		require.Equal(t, "queued", a.Flow[0].Action)
		require.Equal(t, r1, a.Flow[0].RunID)
	}
	s.kill()
	servers := []*server{st.start(serverOptions{}), st.start(serverOptions{})}
	c = servers[0].api()

	want := []string{`{"doc":"a","n":1}`}
	prev := r1
	for n := 2; n <= 3; n++ {
		c.cancelRun(prev)
		runs := c.waitRuns("sync", n, time.Minute)
		want = append(want, fmt.Sprintf(`{"doc":"a","n":%d}`, n))
		require.Equal(t, want, inputsOf(runs), "one run at a time, in arrival order")
		prev = runs[n-1].ID
	}
	require.Zero(t, st.pendingStarts(), "nothing left to start")
	runs, err := c.listRuns("sync")
	require.NoError(t, err)
	require.Len(t, runs, 3)
}

// TestEventDebounceCrash: a key's burst of events, then a SIGKILL before the
// window is due: the servers started again start one run for the key, with the
// last event's data; another key gets its own. A key whose events never stop
// still gets its run within max_wait.
func TestEventDebounceCrash(t *testing.T) {
	t.Parallel()
	st := newStack(t, stackOptions{})
	s := st.start(serverOptions{})
	c := s.api()
	c.deploy(map[string]string{"cairn.yaml": `name: reindex
triggers:
  - {event: doc.changed, debounce: {key: "event.data.doc", period: 2s, max_wait: 3s}}
steps:
  - {key: a, builtin: noop}
`})
	var window int64
	for i := 1; i <= 3; i++ {
		a := c.sendFlow("doc.changed", fmt.Sprintf("a%d", i), map[string]any{"doc": "a", "n": i})
		require.Equal(t, "debounced", a.Flow[0].Action)
		if i == 1 {
			window = a.Flow[0].Pending
		}
		require.Equal(t, window, a.Flow[0].Pending)
	}
	c.sendFlow("doc.changed", "b1", map[string]any{"doc": "b", "n": 1})
	s.kill()
	servers := []*server{st.start(serverOptions{}), st.start(serverOptions{})}
	c = servers[0].api()

	runs := c.waitRuns("reindex", 2, time.Minute)
	require.ElementsMatch(t, []string{`{"doc":"a","n":3}`, `{"doc":"b","n":1}`}, inputsOf(runs))
	require.Zero(t, st.pendingStarts(), "nothing left to start")
	runs, err := c.listRuns("reindex")
	require.NoError(t, err)
	require.Len(t, runs, 2, "one run per key")

	// Key c never goes quiet (an event every 300 ms, under its 2 s period): its
	// run starts anyway, max_wait (3 s) after its first event, while events
	// still come.
	for i := 1; ; i++ {
		c.sendFlow("doc.changed", fmt.Sprintf("c%d", i), map[string]any{"doc": "c", "n": i})
		runs, err := c.listRuns("reindex")
		require.NoError(t, err)
		if len(runs) == 3 {
			var in struct{ Doc string }
			require.NoError(t, json.Unmarshal([]byte(runs[2].Input), &in))
			require.Equal(t, "c", in.Doc)
			break
		}
		require.Less(t, i, 100, "key c's run has not started after %d events: max_wait does not bound it", i)
		time.Sleep(300 * time.Millisecond) // the pace of key c's events
	}
}

// TestEventBatchCrash: a key's events fill a batch (its run starts at once) and
// open another; a SIGKILL with two batches open; the servers started again start
// each at its timeout, with input.events complete and in arrival order, each
// once.
func TestEventBatchCrash(t *testing.T) {
	t.Parallel()
	st := newStack(t, stackOptions{})
	s := st.start(serverOptions{})
	c := s.api()
	c.deploy(map[string]string{"cairn.yaml": `name: load
triggers:
  - {event: row.added, batch: {max: 5, timeout: 3s, key: "event.data.table"}}
steps:
  - {key: a, builtin: noop}
`})
	for i := 1; i <= 7; i++ {
		a := c.sendFlow("row.added", fmt.Sprintf("t%d", i), map[string]any{"table": "t", "n": i})
		require.Equal(t, "batched", a.Flow[0].Action)
		require.Equal(t, (i-1)%5+1, a.Flow[0].Events)
		require.Equal(t, i == 5, len(a.Started) == 1, "the fifth event fills the batch")
	}
	for i := 1; i <= 2; i++ {
		c.sendFlow("row.added", fmt.Sprintf("u%d", i), map[string]any{"table": "u", "n": i})
	}
	s.kill()
	servers := []*server{st.start(serverOptions{}), st.start(serverOptions{})}
	c = servers[0].api()

	runs := c.waitRuns("load", 3, time.Minute)
	require.Zero(t, st.pendingStarts(), "nothing left to start")
	var got [][]string
	for _, r := range runs {
		var in struct {
			Events []struct {
				ID   string `json:"id"`
				Name string `json:"name"`
				Data struct {
					Table string `json:"table"`
				} `json:"data"`
			} `json:"events"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.Input), &in), r.Input)
		var ids []string
		for _, e := range in.Events {
			require.Equal(t, "row.added", e.Name)
			ids = append(ids, e.ID)
		}
		got = append(got, ids)
	}
	require.ElementsMatch(t, [][]string{{"t1", "t2", "t3", "t4", "t5"}, {"t6", "t7"}, {"u1", "u2"}}, got)
	runs, err := c.listRuns("load")
	require.NoError(t, err)
	require.Len(t, runs, 3, "each batch once")
}
