package catalog_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/internal/testenv"
)

// triggerVersion registers a version of workflow (latest) whose definition has
// triggers (JSON, as bundle.Definition keeps them) and one step s.
func triggerVersion(t *testing.T, s *catalog.Store, workflow, triggers string) int {
	t.Helper()
	return definitionVersion(t, s, workflow, `{"name":"`+workflow+`","triggers":`+triggers+`}`)
}

// definitionVersion registers a version of workflow (latest) with definition (the
// parts the catalog reads) and one step, s, and returns its number.
func definitionVersion(t *testing.T, s *catalog.Store, workflow, definition string) int {
	t.Helper()
	var sum [32]byte
	_, _ = rand.Read(sum[:])
	digest := "sha256:" + hex.EncodeToString(sum[:])
	v, _, err := s.VersionRegister(t.Context(), &catalog.VersionRegisterParams{
		Workflow: workflow, Digest: digest, Size: 1, BlobKey: "bundles/sha256/" + digest[7:],
		Definition: json.RawMessage(definition), Fingerprint: digest, Steps: []catalog.NewStep{{Key: "s", MaxAttempts: 1}},
	})
	require.NoError(t, err)
	return v.Version
}

// send ingests event name with id and data, and returns its outcome.
func send(t *testing.T, s *catalog.Store, name, id, data string) catalog.EventOutcome {
	t.Helper()
	ev, dup, err := s.EventIngest(t.Context(), &catalog.EventIngestParams{ID: id, Name: name, Data: json.RawMessage(data), Actor: "test"})
	require.NoError(t, err)
	require.False(t, dup)
	return ev.Outcome
}

// runsOf lists the runs of workflow, oldest first, with their input and status.
func runsOf(t *testing.T, s *catalog.Store, workflow string) []catalog.Run {
	t.Helper()
	var out []catalog.Run
	runs, err := s.RunList(t.Context(), &catalog.RunListParams{Workflow: workflow, Limit: 1000})
	require.NoError(t, err)
	for i := len(runs) - 1; i >= 0; i-- {
		r, err := s.RunGet(t.Context(), runs[i].ID) // with its input
		require.NoError(t, err)
		out = append(out, *r)
	}
	return out
}

// inputs are the runs' inputs, compact, their keys sorted.
func inputs(runs []catalog.Run) []string {
	var out []string
	for _, r := range runs {
		var v any
		_ = json.Unmarshal(r.Input, &v)
		b, _ := json.Marshal(v)
		out = append(out, string(b))
	}
	return out
}

// fire runs one pass of the flow firer.
func flowFire(t *testing.T, s *catalog.Store) *catalog.EventFlowFireResult {
	t.Helper()
	res, err := s.EventFlowFire(t.Context(), &catalog.EventFlowFireParams{})
	require.NoError(t, err)
	require.Empty(t, res.Failed)
	return res
}

// windowsDue moves every window of workflow's due time to now: the time has come.
func windowsDue(t *testing.T, s *catalog.Store, workflow string) {
	t.Helper()
	_, err := s.DB().ExecContext(t.Context(), `UPDATE event_flow_pending SET due_at = now() - interval '1 ms'
WHERE workflow = $1 AND due_at IS NOT NULL`, workflow)
	require.NoError(t, err)
}

// TestEventSingletonSkip: an event whose key has an unfinished run starts nothing
// and says so, naming the key and the run; another key starts its own; once the
// key's run has ended, the next event starts one.
func TestEventSingletonSkip(t *testing.T) {
	t.Parallel()
	s := catalog.New(testenv.DB(t), nil)
	triggerVersion(t, s, "sync", `[{"event":"doc.changed","singleton":{"key":"event.data.doc","mode":"skip"}}]`)

	o := send(t, s, "doc.changed", "e1", `{"doc":"a","n":1}`)
	require.Len(t, o.Started, 1)
	first := o.Started[0].RunID
	o = send(t, s, "doc.changed", "e2", `{"doc":"a","n":2}`)
	require.Empty(t, o.Started)
	require.Equal(t, []catalog.EventFlow{{Workflow: "sync", Version: 1, Trigger: 0, Kind: "singleton", Action: "skipped",
		Key: "a", RunID: &first}}, o.Flow)
	// GET /v1/events/{id} shows it as well.
	ev, err := s.ReceivedEventGet(t.Context(), "e2")
	require.NoError(t, err)
	require.Equal(t, o.Flow, ev.Outcome.Flow)

	o = send(t, s, "doc.changed", "e3", `{"doc":"b","n":3}`)
	require.Len(t, o.Started, 1, "another key")

	require.NoError(t, s.RunCancel(t.Context(), first, "done"))
	o = send(t, s, "doc.changed", "e4", `{"doc":"a","n":4}`)
	require.Len(t, o.Started, 1, "the key's run has ended")
	require.Empty(t, o.Flow)
	require.Equal(t, []string{`{"doc":"a","n":1}`, `{"doc":"b","n":3}`, `{"doc":"a","n":4}`}, inputs(runsOf(t, s, "sync")))

	// A key that fails on the event blocks only its trigger, and says so.
	o = send(t, s, "doc.changed", "e5", `{"n":5}`)
	require.Empty(t, o.Started)
	require.Len(t, o.Errors, 1)
	require.Equal(t, "triggers[0].singleton.key", o.Errors[0].Where)
	// So does a key the catalog cannot hold: too long, or with a NUL.
	o = send(t, s, "doc.changed", "e6", fmt.Sprintf(`{"doc":%q}`, strings.Repeat("k", 1001)))
	require.Empty(t, o.Started)
	require.Len(t, o.Errors, 1)
	require.Equal(t, "triggers[0].singleton.key", o.Errors[0].Where)
	require.Contains(t, o.Errors[0].Message, "key of 1001 bytes: at most 1000")
	triggerVersion(t, s, "nul", `[{"event":"nul.key","singleton":{"key":"'a\\u0000b'"}}]`)
	o = send(t, s, "nul.key", "n1", `{}`)
	require.Empty(t, o.Started)
	require.Len(t, o.Errors, 1)
	require.Equal(t, "key holds a NUL character", o.Errors[0].Message)
}

// TestEventSingletonCancelOther: an event whose key has an unfinished run cancels
// it, with a reason naming the event, and starts its own.
func TestEventSingletonCancelOther(t *testing.T) {
	t.Parallel()
	s := catalog.New(testenv.DB(t), nil)
	triggerVersion(t, s, "sync", `[{"event":"doc.changed","singleton":{"key":"event.data.doc","mode":"cancel_other"}}]`)

	first := send(t, s, "doc.changed", "e1", `{"doc":"a"}`).Started[0].RunID
	o := send(t, s, "doc.changed", "e2", `{"doc":"a"}`)
	require.Len(t, o.Started, 1)
	require.Equal(t, []uuid.UUID{first}, o.Canceled)
	require.Equal(t, "canceled_other", o.Flow[0].Action)
	require.Equal(t, &first, o.Flow[0].RunID)
	run, err := s.RunGet(t.Context(), first)
	require.NoError(t, err)
	require.Equal(t, catalog.RunCanceled, run.Status)
	require.Contains(t, string(run.Error), `canceled by event doc.changed (e2): singleton key \"a\" of sync triggers[0], mode cancel_other`)
	second, err := s.RunGet(t.Context(), o.Started[0].RunID)
	require.NoError(t, err)
	require.Equal(t, catalog.RunPending, second.Status)
}

// TestEventSingletonQueue: events whose key has an unfinished run wait for it, in
// arrival order, one run at a time: the firer starts the next once the key's run
// has ended, and an event that comes first starts it itself before it queues.
func TestEventSingletonQueue(t *testing.T) {
	t.Parallel()
	s := catalog.New(testenv.DB(t), nil)
	triggerVersion(t, s, "sync", `[{"event":"doc.changed","singleton":{"key":"event.data.doc","mode":"queue"}}]`)

	r1 := send(t, s, "doc.changed", "e1", `{"doc":"a","n":1}`).Started[0].RunID
	for i := 2; i <= 3; i++ {
		o := send(t, s, "doc.changed", fmt.Sprintf("e%d", i), fmt.Sprintf(`{"doc":"a","n":%d}`, i))
		require.Empty(t, o.Started)
		require.Equal(t, "queued", o.Flow[0].Action)
		require.Equal(t, &r1, o.Flow[0].RunID)
		require.NotNil(t, o.Flow[0].Pending)
	}
	res := flowFire(t, s)
	require.Zero(t, res.Started["queue"], "the key's run is unfinished")
	require.Len(t, runsOf(t, s, "sync"), 1)

	require.NoError(t, s.RunCancel(t.Context(), r1, "done"))
	res = flowFire(t, s)
	require.Equal(t, 1, res.Started["queue"], "one at a time")
	res = flowFire(t, s)
	require.Zero(t, res.Started["queue"])
	runs := runsOf(t, s, "sync")
	require.Equal(t, []string{`{"doc":"a","n":1}`, `{"doc":"a","n":2}`}, inputs(runs))

	// e2's run ends; e4 comes before any pass: it starts e3's (its turn), and queues.
	require.NoError(t, s.RunCancel(t.Context(), runs[1].ID, "done"))
	o := send(t, s, "doc.changed", "e4", `{"doc":"a","n":4}`)
	require.Equal(t, "queued", o.Flow[0].Action)
	runs = runsOf(t, s, "sync")
	require.Equal(t, []string{`{"doc":"a","n":1}`, `{"doc":"a","n":2}`, `{"doc":"a","n":3}`}, inputs(runs))
	require.Equal(t, &runs[2].ID, o.Flow[0].RunID)
	require.Equal(t, []catalog.EventStarted{{RunID: runs[2].ID, Workflow: "sync", Version: 1, Trigger: 0}}, o.Started,
		"the queued start it started first")

	require.NoError(t, s.RunCancel(t.Context(), runs[2].ID, "done"))
	require.Equal(t, 1, flowFire(t, s).Started["queue"])
	require.Equal(t, `{"doc":"a","n":4}`, inputs(runsOf(t, s, "sync"))[3])
	var left int
	require.NoError(t, s.DB().GetContext(t.Context(), &left, `SELECT count(*) FROM event_flow_pending`))
	require.Zero(t, left)
}

// TestEventDebounce: a key's events make one window; each one moves its due time
// period on, but never past max_wait after the first; when due, one run starts
// with the last event's input. Other keys have their own window.
func TestEventDebounce(t *testing.T) {
	t.Parallel()
	s := catalog.New(testenv.DB(t), nil)
	triggerVersion(t, s, "index", `[{"event":"doc.changed","input":"event.data","debounce":{"key":"event.data.doc","period":"1h0m0s","max_wait":"2h0m0s"}}]`)

	var window int64
	for i := 1; i <= 3; i++ {
		o := send(t, s, "doc.changed", fmt.Sprintf("a%d", i), fmt.Sprintf(`{"doc":"a","n":%d}`, i))
		require.Empty(t, o.Started)
		require.Len(t, o.Flow, 1)
		f := o.Flow[0]
		require.Equal(t, "debounced", f.Action)
		require.Equal(t, i, f.Events)
		if i == 1 {
			window = *f.Pending
		}
		require.Equal(t, window, *f.Pending, "one window per key")
	}
	send(t, s, "doc.changed", "b1", `{"doc":"b","n":1}`)
	res := flowFire(t, s)
	require.Zero(t, res.Started["debounce"], "not due")

	// max_wait: a window opened 110 minutes ago is due 10 minutes from now at the
	// latest, whatever its period.
	_, err := s.DB().ExecContext(t.Context(), `UPDATE event_flow_pending SET opened_at = now() - interval '110 minutes' WHERE id = $1`, window)
	require.NoError(t, err)
	o := send(t, s, "doc.changed", "a4", `{"doc":"a","n":4}`)
	var dueIn float64
	require.NoError(t, s.DB().GetContext(t.Context(), &dueIn, `SELECT extract(epoch FROM due_at - opened_at) FROM event_flow_pending WHERE id = $1`, window))
	require.InDelta(t, 7200, dueIn, 0.001, "bounded by max_wait")
	require.Equal(t, 4, o.Flow[0].Events)

	windowsDue(t, s, "index")
	res = flowFire(t, s)
	require.Equal(t, 2, res.Started["debounce"])
	require.ElementsMatch(t, []string{`{"doc":"a","n":4}`, `{"doc":"b","n":1}`}, inputs(runsOf(t, s, "index")))
	require.Zero(t, flowFire(t, s).Started["debounce"], "fired once")

	// The next event of a key opens a new window.
	o = send(t, s, "doc.changed", "a5", `{"doc":"a","n":5}`)
	require.NotEqual(t, window, *o.Flow[0].Pending)
	require.Equal(t, 1, o.Flow[0].Events)
}

// TestEventDebounceDueAtIngest: an event that finds its key's window due but not
// fired yet (no pass came by) starts the window's run itself and opens the next.
func TestEventDebounceDueAtIngest(t *testing.T) {
	t.Parallel()
	s := catalog.New(testenv.DB(t), nil)
	triggerVersion(t, s, "index", `[{"event":"doc.changed","debounce":{"period":"1h0m0s"}}]`)
	send(t, s, "doc.changed", "a1", `{"n":1}`)
	windowsDue(t, s, "index")
	o := send(t, s, "doc.changed", "a2", `{"n":2}`)
	require.Equal(t, 1, o.Flow[0].Events, "a new window")
	runs := runsOf(t, s, "index")
	require.Equal(t, []string{`{"n":1}`}, inputs(runs))
	require.Len(t, o.Started, 1)
	require.Equal(t, runs[0].ID, o.Started[0].RunID, "the due window it started first")
	windowsDue(t, s, "index")
	require.Equal(t, 1, flowFire(t, s).Started["debounce"])
	require.Equal(t, []string{`{"n":1}`, `{"n":2}`}, inputs(runsOf(t, s, "index")))
}

// TestEventBatch: a key's events make a batch; the max-th starts its run at once
// with input.events, every event whole, in arrival order; a batch that does not
// fill starts when its timeout is due.
func TestEventBatch(t *testing.T) {
	t.Parallel()
	s := catalog.New(testenv.DB(t), nil)
	triggerVersion(t, s, "load", `[{"event":"row.added","batch":{"max":3,"timeout":"1h0m0s","key":"event.data.table"}}]`)

	for i := 1; i <= 2; i++ {
		o := send(t, s, "row.added", fmt.Sprintf("r%d", i), fmt.Sprintf(`{"table":"t","n":%d}`, i))
		require.Empty(t, o.Started)
		require.Equal(t, "batched", o.Flow[0].Action)
		require.Equal(t, i, o.Flow[0].Events)
	}
	send(t, s, "row.added", "other", `{"table":"u","n":0}`)
	o := send(t, s, "row.added", "r3", `{"table":"t","n":3}`)
	require.Len(t, o.Started, 1, "the batch is full")
	require.Equal(t, &o.Started[0].RunID, o.Flow[0].RunID)
	require.Equal(t, 3, o.Flow[0].Events)
	o = send(t, s, "row.added", "r4", `{"table":"t","n":4}`)
	require.Equal(t, 1, o.Flow[0].Events, "a new batch")

	windowsDue(t, s, "load")
	res := flowFire(t, s)
	require.Equal(t, 2, res.Started["batch"])
	type batchInput struct {
		Events []struct {
			ID   string `json:"id"`
			Name string `json:"name"`
			Data struct {
				N int `json:"n"`
			} `json:"data"`
			ReceivedAt string `json:"received_at"`
		} `json:"events"`
	}
	var got [][]string
	for _, r := range runsOf(t, s, "load") {
		var in batchInput
		require.NoError(t, json.Unmarshal(r.Input, &in))
		var ids []string
		for _, e := range in.Events {
			require.Equal(t, "row.added", e.Name)
			require.NotEmpty(t, e.ReceivedAt)
			ids = append(ids, e.ID)
		}
		got = append(got, ids)
	}
	require.ElementsMatch(t, [][]string{{"r1", "r2", "r3"}, {"other"}, {"r4"}}, got)
}

// TestEventFlowFireOnce: passes racing over the same due windows (as several
// servers' do) start each window's run once.
func TestEventFlowFireOnce(t *testing.T) {
	t.Parallel()
	s := catalog.New(testenv.DB(t), nil)
	triggerVersion(t, s, "index", `[{"event":"doc.changed","debounce":{"key":"event.data.doc","period":"1h0m0s"}}]`)
	const keys = 40
	for i := range keys {
		send(t, s, "doc.changed", fmt.Sprintf("e%d", i), fmt.Sprintf(`{"doc":"%d"}`, i))
	}
	windowsDue(t, s, "index")
	var wg sync.WaitGroup
	var mu sync.Mutex
	started := 0
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				res, err := s.EventFlowFire(context.Background(), &catalog.EventFlowFireParams{Limit: 5})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				started += res.Started["debounce"]
				mu.Unlock()
				if res.Taken == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	require.Equal(t, keys, started)
	require.Len(t, runsOf(t, s, "index"), keys)
}

// TestEventFlowConcurrentEvents: events of one key sent at once (as to several
// servers) are serialized by the key's lock: one singleton run, the others
// skipped; one debounce window; batches that hold every event once.
func TestEventFlowConcurrentEvents(t *testing.T) {
	t.Parallel()
	s := catalog.New(testenv.DB(t), nil)
	triggerVersion(t, s, "flows", `[
  {"event":"ping","singleton":{"key":"event.data.k"}},
  {"event":"ping","debounce":{"key":"event.data.k","period":"1h0m0s"}},
  {"event":"ping","batch":{"key":"event.data.k","max":5,"timeout":"1h0m0s"}}]`)
	const n = 20
	outcomes := make([]catalog.EventOutcome, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ev, _, err := s.EventIngest(context.Background(), &catalog.EventIngestParams{ID: fmt.Sprintf("p%d", i),
				Name: "ping", Data: json.RawMessage(`{"k":"x"}`), Actor: "test"})
			if err != nil {
				t.Error(err)
				return
			}
			outcomes[i] = ev.Outcome
		}()
	}
	wg.Wait()
	actions := map[string]int{}
	windows := map[int64]bool{}
	for _, o := range outcomes {
		for _, f := range o.Flow {
			actions[f.Kind+" "+f.Action]++
			if f.Kind == "debounce" {
				windows[*f.Pending] = true
			}
		}
	}
	require.Equal(t, map[string]int{"singleton skipped": n - 1, "debounce debounced": n, "batch batched": n}, actions)
	require.Len(t, windows, 1, "one debounce window")
	// One singleton run and four full batches so far; the debounce window fires.
	runs := runsOf(t, s, "flows")
	require.Len(t, runs, 1+n/5)
	windowsDue(t, s, "flows")
	require.Equal(t, 1, flowFire(t, s).Started["debounce"])
	seen := map[string]int{}
	for _, r := range runsOf(t, s, "flows") {
		var in struct {
			Events []struct {
				ID string `json:"id"`
			} `json:"events"`
		}
		require.NoError(t, json.Unmarshal(r.Input, &in))
		for _, e := range in.Events {
			seen[e.ID]++
		}
	}
	require.Len(t, seen, n, "every event in a batch")
	for id, c := range seen {
		require.Equal(t, 1, c, "event %s in %d batches", id, c)
	}
}

// TestEventSingletonsForget: the row of a key whose run has ended is deleted; that
// of a key whose run is unfinished, or that queues starts, is kept.
func TestEventSingletonsForget(t *testing.T) {
	t.Parallel()
	s := catalog.New(testenv.DB(t), nil)
	triggerVersion(t, s, "sync", `[{"event":"doc.changed","singleton":{"key":"event.data.doc","mode":"queue"}}]`)
	ended := send(t, s, "doc.changed", "a1", `{"doc":"a"}`).Started[0].RunID
	send(t, s, "doc.changed", "b1", `{"doc":"b"}`)
	queued := send(t, s, "doc.changed", "c1", `{"doc":"c"}`).Started[0].RunID
	send(t, s, "doc.changed", "c2", `{"doc":"c"}`)
	require.NoError(t, s.RunCancel(t.Context(), ended, "done"))
	require.NoError(t, s.RunCancel(t.Context(), queued, "done"))
	n, err := s.EventSingletonsForget(t.Context(), 100)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	var keys []string
	require.NoError(t, s.DB().SelectContext(t.Context(), &keys, `SELECT flow_key FROM event_singletons ORDER BY flow_key`))
	require.Equal(t, []string{"b", "c"}, keys)
	// The forgotten key starts a run again.
	require.Len(t, send(t, s, "doc.changed", "a2", `{"doc":"a"}`).Started, 1)
}

// TestEventBatchBytes: an event that would take its batch's events over 1 MiB
// starts the batch's run first, without it, and opens the next batch.
func TestEventBatchBytes(t *testing.T) {
	t.Parallel()
	s := catalog.New(testenv.DB(t), nil)
	triggerVersion(t, s, "load", `[{"event":"row.added","batch":{"max":100,"timeout":"1h0m0s"}}]`)
	big := strings.Repeat("x", 300<<10)
	var started []catalog.EventStarted
	for i := 1; i <= 4; i++ {
		o := send(t, s, "row.added", fmt.Sprintf("r%d", i), fmt.Sprintf(`{"n":%d,"pad":%q}`, i, big))
		started = append(started, o.Started...)
		require.Equal(t, map[bool]int{true: 1, false: i}[i == 4], o.Flow[0].Events, "r%d", i)
	}
	require.Len(t, started, 1, "the fourth event started the first three's run")
	run, err := s.RunGet(t.Context(), started[0].RunID)
	require.NoError(t, err)
	var in struct {
		Events []struct {
			ID string `json:"id"`
		} `json:"events"`
	}
	require.NoError(t, json.Unmarshal(run.Input, &in))
	require.Len(t, in.Events, 3)
	require.Equal(t, "r1", in.Events[0].ID)
	require.Equal(t, "r3", in.Events[2].ID)
}

// TestEventFlowLockStress sends events to singleton (cancel_other and queue, one
// workflow's keys shared by both: its every run is a singleton's), debounce and
// batch triggers and to a cancel_on
// from several goroutines at once, beside two flow firers (as two servers') and an
// operator who cancels runs, for a few seconds. Every writer takes the event's
// locks and the keys' in the order of catalog/event_flow.go, so PostgreSQL
// detects no deadlock (counted at the server, as TestLockOrderStress does); each
// singleton key has at most one unfinished run; and once the queues drain, every
// queued start has started.
func TestEventFlowLockStress(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newDeadlockWatch(t, 16)
	db, s := st.db, st.store
	definitionVersion(t, s, "sg", `{"name":"sg","triggers":[
  {"event":"e","singleton":{"key":"event.data.k","mode":"cancel_other"}},
  {"event":"f","singleton":{"key":"event.data.k","mode":"queue"}}],
 "cancel_on":[{"event":"g","match":"event.data.k == input.k"}]}`)
	triggerVersion(t, s, "db", `[
  {"event":"e","debounce":{"key":"event.data.k","period":"50ms","max_wait":"200ms"}},
  {"event":"f","batch":{"key":"event.data.k","max":3,"timeout":"50ms"}},
  {"event":"g","singleton":{"key":"event.data.k","mode":"queue"}}]`)

	work, stop := context.WithTimeout(ctx, 5*time.Second)
	defer stop()
	expected := func(err error) error {
		if err == nil || work.Err() != nil || errors.Is(err, catalog.ErrConflict) || errors.Is(err, catalog.ErrNotFound) {
			return nil
		}
		return err
	}
	var g errgroup.Group
	var seq sync.Mutex
	n := 0
	for range 4 { // senders
		g.Go(func() error {
			for work.Err() == nil {
				seq.Lock()
				n++
				id := fmt.Sprintf("ev%d", n)
				seq.Unlock()
				name := []string{"e", "f", "g"}[mrand.IntN(3)]
				k := []string{"a", "b", "c"}[mrand.IntN(3)]
				_, _, err := s.EventIngest(work, &catalog.EventIngestParams{ID: id, Name: name,
					Data: json.RawMessage(fmt.Sprintf(`{"k":%q}`, k)), Actor: "stress"})
				if err := expected(err); err != nil {
					return fmt.Errorf("send %s: %w", id, err)
				}
			}
			return nil
		})
	}
	for range 2 { // flow firers
		g.Go(func() error {
			for work.Err() == nil {
				if _, err := s.EventFlowFire(work, &catalog.EventFlowFireParams{Limit: 5}); expected(err) != nil {
					return fmt.Errorf("fire: %w", err)
				}
				if _, err := s.EventSingletonsForget(work, 10); expected(err) != nil {
					return fmt.Errorf("forget: %w", err)
				}
				time.Sleep(5 * time.Millisecond) // pacing, not a wait for a condition
			}
			return nil
		})
	}
	g.Go(func() error { // an operator ends runs, as their steps would
		for work.Err() == nil {
			var ids []uuid.UUID
			if err := db.SelectContext(work, &ids, `SELECT id FROM runs WHERE status = 'pending' ORDER BY random() LIMIT 3`); expected(err) != nil {
				return err
			}
			for _, id := range ids {
				if err := s.RunCancel(work, id, "done"); expected(err) != nil {
					return fmt.Errorf("cancel %s: %w", id, err)
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		return nil
	})
	require.NoError(t, g.Wait())

	var busy []string
	require.NoError(t, db.SelectContext(ctx, &busy, `
SELECT input->>'k' FROM runs WHERE status = 'pending' AND workflow = 'sg'
GROUP BY input->>'k' HAVING count(*) > 1`))
	require.Empty(t, busy, "singleton keys with more than one unfinished run")

	// Drain: end every run, fire until nothing is held.
	for range 1000 {
		_, err := db.ExecContext(ctx, `SELECT cairn_run_cancel(id, 'drain') FROM runs WHERE status = 'pending'`)
		require.NoError(t, err)
		_, err = db.ExecContext(ctx, `UPDATE event_flow_pending SET due_at = now() WHERE due_at > now()`)
		require.NoError(t, err)
		_, err = s.EventFlowFire(ctx, &catalog.EventFlowFireParams{Limit: 100})
		require.NoError(t, err)
		var left int
		require.NoError(t, db.GetContext(ctx, &left, `SELECT count(*) FROM event_flow_pending`))
		if left == 0 {
			break
		}
	}
	var left int
	require.NoError(t, db.GetContext(ctx, &left, `SELECT count(*) FROM event_flow_pending`))
	require.Zero(t, left, "held starts left")
	t.Logf("events: %d", n)
	st.requireNone(t)
}
