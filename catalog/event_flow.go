package catalog

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/cairnrun/cairn/expr"
)

// Start-time flow control of event triggers (docs/events.md): a trigger's
// singleton, debounce or batch. Its state is rows (migration 00091), each written
// under the transaction-scoped advisory lock of its key (flowLockName), never timers
// in memory:
//   - event_singletons names the run each singleton key started last (the key is
//     busy while it is unfinished); event_flow_pending holds a queued singleton
//     start until that run ends;
//   - event_flow_pending holds an open debounce or batch window with its due time,
//     and event_flow_items a batch's events.
//
// An event takes its keys' locks after its name's (received_event.go), all of
// them before anything else it writes, in the order of their names, so that two
// events never wait for each other's keys in a circle; then the lock order of
// catalog/sql/run_control.sql. EventFlowFire, the maintenance pass that starts
// the due windows and the queued starts, takes its rows FOR UPDATE SKIP LOCKED
// (one server fires each) and then only tries their keys' locks: a key an event
// holds is left for the next pass, and the fire never waits for an event that may
// be waiting for its rows.

const (
	sqlFlowLock    = `SELECT pg_advisory_xact_lock(hashtextextended('cairn_event_flow:' || $1, 0))`
	sqlFlowTryLock = `SELECT pg_try_advisory_xact_lock(hashtextextended('cairn_event_flow:' || $1, 0))`

	// sqlSingletonRun: the run key $2 of workflow $1 started last, and whether it
	// is unfinished.
	sqlSingletonRun = `
SELECT s.run_id, coalesce(r.status IN ('pending', 'running', 'paused', 'compensating'), false) AS active
FROM event_singletons s LEFT JOIN runs r ON r.id = s.run_id
WHERE s.workflow = $1 AND s.flow_key = $2`

	sqlSingletonSet = `
INSERT INTO event_singletons (workflow, flow_key, run_id) VALUES ($1, $2, $3)
ON CONFLICT (workflow, flow_key) DO UPDATE SET run_id = EXCLUDED.run_id, started_at = now()`

	flowPendingColumns = `id, kind, workflow, trigger_idx, flow_key, version, labels, priority, input, events,
bytes, last_event, opened_at, due_at, due_at <= now() AS due`

	// sqlFlowQueueHead: the oldest queued start of key $2 of workflow $1.
	sqlFlowQueueHead = `
SELECT ` + flowPendingColumns + ` FROM event_flow_pending
WHERE kind = 'queue' AND workflow = $1 AND flow_key = $2
ORDER BY id LIMIT 1 FOR UPDATE`

	sqlFlowQueueInsert = `
INSERT INTO event_flow_pending (kind, workflow, trigger_idx, flow_key, version, labels, priority, input, events, last_event)
VALUES ('queue', $1, $2, $3, $4, $5, $6, $7, 1, $8)
RETURNING id`

	// sqlFlowWindow: the open window of kind $3 of trigger $2 of workflow $1, key $4.
	sqlFlowWindow = `
SELECT ` + flowPendingColumns + ` FROM event_flow_pending
WHERE workflow = $1 AND trigger_idx = $2 AND kind = $3 AND flow_key = $4 AND kind <> 'queue'
FOR UPDATE`

	sqlFlowWindowOpen = `
INSERT INTO event_flow_pending (kind, workflow, trigger_idx, flow_key, version, labels, priority, input, events,
    last_event, due_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 0, $9, now() + make_interval(secs => $10))
RETURNING ` + flowPendingColumns

	// sqlFlowDebounce: the debounce window $1 takes an event: its input, and a
	// due time period ($3 s) from now, but at most max_wait ($4 s, NULL: none)
	// after it opened.
	sqlFlowDebounce = `
UPDATE event_flow_pending SET input = $2, events = events + 1, last_event = $5, version = $6, labels = $7,
    priority = $8, due_at = least(now() + make_interval(secs => $3), opened_at + make_interval(secs => $4))
WHERE id = $1
RETURNING events, due_at`

	// sqlFlowBatchAdd: the batch window $1 takes an event ($2, its view).
	sqlFlowBatchAdd = `
WITH w AS (
    UPDATE event_flow_pending SET events = events + 1, bytes = bytes + octet_length($2::text), last_event = $3,
        version = $4, labels = $5, priority = $6
    WHERE id = $1 RETURNING events, due_at)
INSERT INTO event_flow_items (pending_id, n, item) SELECT $1, w.events, $2::text::jsonb FROM w
RETURNING n, (SELECT due_at FROM w)`

	sqlFlowBatchInput = `
SELECT jsonb_build_object('events', coalesce(jsonb_agg(item ORDER BY n), '[]'))
FROM event_flow_items WHERE pending_id = $1`

	sqlFlowDelete = `DELETE FROM event_flow_pending WHERE id = $1`

	// sqlFlowDefer: a window whose run could not be created is tried again later.
	sqlFlowDefer = `
UPDATE event_flow_pending SET due_at = now() + interval '1 minute', tries = tries + 1, last_error = $2
WHERE id = $1 AND kind <> 'queue'`

	// sqlFlowDue: up to $1 due windows no other server holds, earliest first.
	sqlFlowDue = `
SELECT ` + flowPendingColumns + ` FROM event_flow_pending
WHERE due_at <= now()
ORDER BY due_at
LIMIT $1
FOR UPDATE SKIP LOCKED`

	// sqlFlowQueueDue: up to $1 queued starts at the head of their key's queue
	// whose key's run has ended, that no other server holds.
	sqlFlowQueueDue = `
SELECT ` + flowPendingColumns + ` FROM event_flow_pending q
WHERE q.kind = 'queue'
  AND NOT EXISTS (SELECT 1 FROM event_flow_pending p
                  WHERE p.kind = 'queue' AND p.workflow = q.workflow AND p.flow_key = q.flow_key AND p.id < q.id)
  AND NOT EXISTS (SELECT 1 FROM event_singletons s JOIN runs r ON r.id = s.run_id
                  WHERE s.workflow = q.workflow AND s.flow_key = q.flow_key
                    AND r.status IN ('pending', 'running', 'paused', 'compensating'))
ORDER BY q.id
LIMIT $1
FOR UPDATE OF q SKIP LOCKED`

	sqlFlowNextDue = `SELECT min(due_at) FROM event_flow_pending WHERE due_at IS NOT NULL`

	// sqlSingletonsEnded deletes up to $1 rows of keys whose run has ended and
	// that queue nothing, whose keys it can lock at once (an event holding one
	// keeps it). The oldest first: a key's row is rewritten by each run it starts.
	sqlSingletonsEnded = `
DELETE FROM event_singletons d
WHERE (d.workflow, d.flow_key) IN (
    SELECT s.workflow, s.flow_key FROM event_singletons s LEFT JOIN runs r ON r.id = s.run_id
    WHERE (r.id IS NULL OR r.status NOT IN ('pending', 'running', 'paused', 'compensating'))
      AND NOT EXISTS (SELECT 1 FROM event_flow_pending p
                      WHERE p.kind = 'queue' AND p.workflow = s.workflow AND p.flow_key = s.flow_key)
    ORDER BY s.started_at
    LIMIT $1
    FOR UPDATE OF s SKIP LOCKED)
  AND pg_try_advisory_xact_lock(hashtextextended('cairn_event_flow:singleton' || chr(31) || d.workflow || chr(31) || d.flow_key, 0))`
)

// The kinds of a trigger's flow control, as EventFlow and the metrics name them.
const (
	FlowSingleton = "singleton"
	FlowDebounce  = "debounce"
	FlowBatch     = "batch"
	// FlowQueue is a singleton's queued start.
	FlowQueue = "queue"
)

// The actions of EventFlow.
const (
	// FlowSkipped: the key had an unfinished run (RunID); nothing started.
	FlowSkipped = "skipped"
	// FlowCanceledOther: the key's unfinished run (RunID) was canceled and the
	// event's started (in started).
	FlowCanceledOther = "canceled_other"
	// FlowQueued: the key had an unfinished run (RunID); the event's start waits
	// for it to end (Pending).
	FlowQueued = "queued"
	// FlowDebounced: the event is its key's window's latest (Pending, due at
	// DueAt).
	FlowDebounced = "debounced"
	// FlowBatched: the event joined its key's batch (Pending, Events so far);
	// the batch's run started with it when it filled the batch (RunID).
	FlowBatched = "batched"
)

// maxFlowKey bounds a flow key's length, in bytes.
const maxFlowKey = 1000

// maxBatchBytes bounds a batch's events, as JSON text: an event that would take a
// batch over it starts the batch's run first and opens the next batch. It is the
// API's bound of a run's input (1 MiB; large data belongs in the blob store, and
// an event's large data is a $blob reference already).
const maxBatchBytes = 1 << 20

// EventFlow is what a trigger's flow control did with an event. Its doc and enum
// tags describe it in the API's OpenAPI document (api/received_events.go).
type EventFlow struct {
	Workflow string `json:"workflow"`
	Version  int    `json:"version"`
	Trigger  int    `json:"trigger" doc:"the index of the trigger in the version's triggers"`
	// Kind is singleton, debounce or batch.
	Kind string `json:"kind" enum:"singleton,debounce,batch"`
	// Action: skipped, canceled_other, queued, debounced or batched.
	Action string `json:"action" enum:"skipped,canceled_other,queued,debounced,batched"`
	Key    string `json:"key" doc:"the key its key expression gave (empty: the trigger has no key)"`
	// RunID is the key's unfinished run (skipped, canceled_other, queued), or
	// the run the event's batch started (batched, when it filled it).
	RunID *uuid.UUID `json:"run_id,omitempty" doc:"skipped, canceled_other, queued: the key's unfinished run; batched: the run the event started by filling its batch"`
	// Pending is the held start (a window, or a queued start) the event is in.
	Pending *int64 `json:"pending,omitempty" doc:"the held start the event is in: its debounce or batch window, or its queued start"`
	// DueAt is when the window's run starts at the latest, as things stand.
	DueAt *time.Time `json:"due_at,omitempty" doc:"debounced, batched: when the window's run starts at the latest, as things stand"`
	// Events is how many events the window holds with this one.
	Events int `json:"events,omitempty" doc:"debounced, batched: how many events the window holds, this one included"`
}

// triggerFlow is a trigger's flow control as the definition keeps it
// (bundle.Singleton, bundle.Debounce, bundle.Batch; durations as strings).
type triggerFlow struct {
	Singleton *struct {
		Key  string `json:"key"`
		Mode string `json:"mode"`
	} `json:"singleton"`
	Debounce *struct {
		Key     string `json:"key"`
		Period  string `json:"period"`
		MaxWait string `json:"max_wait"`
	} `json:"debounce"`
	Batch *struct {
		Max     int    `json:"max"`
		Timeout string `json:"timeout"`
		Key     string `json:"key"`
	} `json:"batch"`
}

// flowKind is the entry's kind, "" for none, and its key's expression.
func (e *triggerFlow) flowKind() (kind, key string) {
	switch {
	case e.Singleton != nil:
		return FlowSingleton, e.Singleton.Key
	case e.Debounce != nil:
		return FlowDebounce, e.Debounce.Key
	case e.Batch != nil:
		return FlowBatch, e.Batch.Key
	}
	return "", ""
}

// flowLockName is the name of the advisory lock of a key: a singleton's key is
// its workflow's; a window's is its trigger's.
func flowLockName(kind, workflow string, trigger int, key string) string {
	const sep = "\x1f"
	if kind == FlowSingleton {
		return "singleton" + sep + workflow + sep + key
	}
	return fmt.Sprintf("%s%s%s%s%d%s%s", kind, sep, workflow, sep, trigger, sep, key)
}

// flowKeyOf evaluates a key expression over the event (view): a string, or an
// integer in decimal; "" when src is empty.
func flowKeyOf(ctx context.Context, src string, view json.RawMessage) (string, error) {
	if src == "" {
		return "", nil
	}
	prg, err := expr.EventEnv.Compile(src)
	if err != nil {
		return "", err
	}
	k, err := prg.EvalString(ctx, expr.Vars{expr.Event: view, expr.Input: json.RawMessage("null")})
	if err != nil {
		return "", err
	}
	if len(k) > maxFlowKey {
		return "", fmt.Errorf("key of %d bytes: at most %d", len(k), maxFlowKey)
	}
	if strings.ContainsRune(k, 0) {
		return "", errors.New("key holds a NUL character")
	}
	return k, nil
}

// triggerStart is a trigger an event matched: the run it starts, or the flow
// control that decides.
type triggerStart struct {
	workflow string
	version  int
	index    int
	entry    eventEntry
	input    json.RawMessage
	kind     string // "" for none
	key      string
}

func (t *triggerStart) where() string { return fmt.Sprintf("triggers[%d]", t.index) }

func (t *triggerStart) lockName() string {
	return flowLockName(t.kind, t.workflow, t.index, t.key)
}

// flowLockAll takes the locks of the keys of starts, each once, in the order of
// their names.
func flowLockAll(ctx context.Context, tx *sqlx.Tx, starts []triggerStart) error {
	var names []string
	for i := range starts {
		if starts[i].kind != "" {
			names = append(names, starts[i].lockName())
		}
	}
	slices.Sort(names)
	for _, n := range slices.Compact(names) {
		if _, err := tx.ExecContext(ctx, sqlFlowLock, n); err != nil {
			return err
		}
	}
	return nil
}

// flowPending is a row of event_flow_pending.
type flowPending struct {
	ID       int64      `db:"id"`
	Kind     string     `db:"kind"`
	Workflow string     `db:"workflow"`
	Trigger  int        `db:"trigger_idx"`
	Key      string     `db:"flow_key"`
	Version  int        `db:"version"`
	Labels   JSON       `db:"labels"`
	Priority *int       `db:"priority"`
	Input    JSON       `db:"input"`
	Events   int        `db:"events"`
	Bytes    int64      `db:"bytes"`
	Last     string     `db:"last_event"`
	OpenedAt time.Time  `db:"opened_at"`
	DueAt    *time.Time `db:"due_at"`
	Due      *bool      `db:"due"`
}

// flowRun is what a run started by flow control needs.
type flowRun struct {
	workflow string
	version  int
	input    json.RawMessage
	labels   map[string]string
	priority *int
}

// startRefused is a run that could not be created (its input refused, its
// version gone): its savepoint was rolled back and the transaction goes on.
type startRefused struct{ err error }

func (e *startRefused) Error() string { return e.err.Error() }
func (e *startRefused) Unwrap() error { return e.err }

// start creates the run in a savepoint of tx: a failure that is not the
// transaction's (ErrRetryable, ctx ended) is a *startRefused and leaves tx usable.
func (f *flowRun) start(ctx context.Context, s *Store, tx *sqlx.Tx) (*Run, error) {
	var run *Run
	err := savepoint(ctx, tx, func() error {
		var err error
		run, _, err = runCreateTx(ctx, tx, &RunCreateParams{Workflow: f.workflow, Version: f.version,
			Input: f.input, Labels: Labels(f.labels), Priority: f.priority}, s.cfg.IdempotencyTTL, false)
		return err
	})
	if err != nil {
		if terr := translateError(err); errors.Is(terr, ErrRetryable) || ctx.Err() != nil {
			return nil, terr
		}
		return nil, &startRefused{err: translateError(err)}
	}
	return run, nil
}

// pendingRun is the run of a pending row: a batch's input is its events.
func pendingRun(ctx context.Context, tx *sqlx.Tx, p *flowPending) (*flowRun, error) {
	r := &flowRun{workflow: p.Workflow, version: p.Version, input: json.RawMessage(p.Input), priority: p.Priority}
	if len(p.Labels) > 0 {
		if err := json.Unmarshal(p.Labels, &r.labels); err != nil {
			return nil, fmt.Errorf("labels of pending start %d: %w", p.ID, err)
		}
	}
	if p.Kind == FlowBatch {
		var in JSON
		if err := tx.GetContext(ctx, &in, sqlFlowBatchInput, p.ID); err != nil {
			return nil, err
		}
		r.input = json.RawMessage(in)
	}
	if len(r.input) == 0 {
		r.input = json.RawMessage("null")
	}
	return r, nil
}

// firePending starts the run of pending row p (its key's lock held) and deletes
// the row; a queued start becomes its key's run. A run that cannot be created is
// a *startRefused; a window is then tried again in a minute.
func (s *Store) firePending(ctx context.Context, tx *sqlx.Tx, p *flowPending) (*Run, error) {
	fr, err := pendingRun(ctx, tx, p)
	if err != nil {
		return nil, err
	}
	run, err := fr.start(ctx, s, tx)
	if err != nil {
		var refused *startRefused
		if errors.As(err, &refused) && p.Kind != FlowQueue {
			if _, derr := tx.ExecContext(ctx, sqlFlowDefer, p.ID, err.Error()); derr != nil {
				return nil, derr
			}
		}
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, sqlFlowDelete, p.ID); err != nil {
		return nil, err
	}
	if p.Kind == FlowQueue {
		if _, err := tx.ExecContext(ctx, sqlSingletonSet, p.Workflow, p.Key, run.ID); err != nil {
			return nil, err
		}
	}
	return run, nil
}

// savepoint runs fn so that a failure of its statements leaves tx usable.
func savepoint(ctx context.Context, tx *sqlx.Tx, fn func() error) error {
	if _, err := tx.ExecContext(ctx, `SAVEPOINT cairn_event`); err != nil {
		return err
	}
	if err := fn(); err != nil {
		if _, rerr := tx.ExecContext(ctx, `ROLLBACK TO SAVEPOINT cairn_event`); rerr != nil {
			return rerr
		}
		return err
	}
	_, err := tx.ExecContext(ctx, `RELEASE SAVEPOINT cairn_event`)
	return err
}

// singletonBusy returns the unfinished run key of workflow has (nil for none),
// its key's lock held. A queued start whose turn has come (the key's run ended
// and no server has started it yet) is started first, so that queued starts keep
// their order: fired is that start, and busy its run.
func (s *Store) singletonBusy(ctx context.Context, tx *sqlx.Tx, workflow, key string) (busy *uuid.UUID, fired *flowPending, err error) {
	var cur struct {
		RunID  uuid.UUID `db:"run_id"`
		Active bool      `db:"active"`
	}
	err = tx.GetContext(ctx, &cur, sqlSingletonRun, workflow, key)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return nil, nil, err
	case cur.Active:
		return &cur.RunID, nil, nil
	}
	for {
		var head flowPending
		err := tx.GetContext(ctx, &head, sqlFlowQueueHead, workflow, key)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, nil, nil
		}
		if err != nil {
			return nil, nil, err
		}
		run, err := s.firePending(ctx, tx, &head)
		if err == nil {
			return &run.ID, &head, nil
		}
		var refused *startRefused
		if !errors.As(err, &refused) {
			return nil, nil, err
		}
		// A queued start whose run cannot be created (its version's input
		// refused it) is dropped: the queue behind it goes on.
		s.cfg.Logger.WarnContext(ctx, "a queued start's run could not be created; it is dropped",
			"workflow", workflow, "key", key, "event", head.Last, "error", err)
		if _, err := tx.ExecContext(ctx, sqlFlowDelete, head.ID); err != nil {
			return nil, nil, err
		}
	}
}

// flowApply applies the flow control of t (its key's lock held) to event ev:
// starts (out.Started), holds (out.Flow) or refuses the start. out.Started also
// lists the runs of held starts the event starts first: a queued start whose turn
// had come, a window that was due or that the event's batch would overflow, each
// under the trigger that held it. cancels collects
// the runs a cancel_other cancels, which the caller cancels after its other locks
// (catalog/sql/run_control.sql: exclusive run locks come last).
func (s *Store) flowApply(ctx context.Context, tx *sqlx.Tx, ev *ReceivedEvent, view json.RawMessage, t *triggerStart,
	out *EventOutcome, cancels *[]flowCancel) error {
	flow := EventFlow{Workflow: t.workflow, Version: t.version, Trigger: t.index, Kind: t.kind, Key: t.key}
	run := &flowRun{workflow: t.workflow, version: t.version, input: t.input, labels: t.entry.Labels, priority: t.entry.Priority}
	var labels any
	if t.entry.Labels != nil {
		b, _ := json.Marshal(t.entry.Labels)
		labels = string(b)
	}
	started := func(r *Run) {
		out.Started = append(out.Started, EventStarted{RunID: r.ID, Workflow: t.workflow, Version: t.version, Trigger: t.index})
	}
	firstStarted := func(p *flowPending, r *Run) {
		out.Started = append(out.Started, EventStarted{RunID: r.ID, Workflow: p.Workflow, Version: p.Version, Trigger: p.Trigger})
	}
	switch t.kind {
	case FlowSingleton:
		busy, fired, err := s.singletonBusy(ctx, tx, t.workflow, t.key)
		if err != nil {
			return err
		}
		if fired != nil {
			firstStarted(fired, &Run{ID: *busy})
		}
		mode := t.entry.Singleton.Mode
		if busy != nil {
			flow.RunID = busy
			switch mode {
			case "cancel_other":
				flow.Action = FlowCanceledOther
				*cancels = append(*cancels, flowCancel{run: *busy, reason: fmt.Sprintf(
					"canceled by event %s (%s): singleton key %q of %s %s, mode cancel_other", ev.Name, ev.ID, t.key, t.workflow, t.where()), start: t})
			case "queue":
				flow.Action = FlowQueued
				var id int64
				if err := tx.GetContext(ctx, &id, sqlFlowQueueInsert, t.workflow, t.index, t.key, t.version, labels,
					t.entry.Priority, string(t.input), ev.ID); err != nil {
					return err
				}
				flow.Pending = &id
				out.Flow = append(out.Flow, flow)
				return nil
			default:
				flow.Action = FlowSkipped
				out.Flow = append(out.Flow, flow)
				return nil
			}
		}
		r, err := run.start(ctx, s, tx)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, sqlSingletonSet, t.workflow, t.key, r.ID); err != nil {
			return err
		}
		started(r)
		if flow.Action != "" {
			out.Flow = append(out.Flow, flow)
		}
		return nil

	case FlowDebounce, FlowBatch:
		w, err := s.flowWindow(ctx, tx, t, labels, ev.ID, len(view), firstStarted)
		if err != nil {
			return err
		}
		flow.Pending = &w.ID
		if t.kind == FlowDebounce {
			d := t.entry.Debounce
			period, _ := time.ParseDuration(d.Period)
			var maxWait any
			if d.MaxWait != "" {
				mw, _ := time.ParseDuration(d.MaxWait)
				maxWait = mw.Seconds()
			}
			var due time.Time
			if err := tx.QueryRowxContext(ctx, sqlFlowDebounce, w.ID, string(t.input), period.Seconds(), maxWait, ev.ID,
				t.version, labels, t.entry.Priority).Scan(&flow.Events, &due); err != nil {
				return err
			}
			flow.Action, flow.DueAt = FlowDebounced, &due
			out.Flow = append(out.Flow, flow)
			return nil
		}
		var due time.Time
		if err := tx.QueryRowxContext(ctx, sqlFlowBatchAdd, w.ID, string(view), ev.ID, t.version, labels,
			t.entry.Priority).Scan(&flow.Events, &due); err != nil {
			return err
		}
		flow.Action, flow.DueAt = FlowBatched, &due
		out.Flow = append(out.Flow, flow)
		if flow.Events >= t.entry.Batch.Max {
			w.Events, w.Kind = flow.Events, FlowBatch
			r, err := s.firePending(ctx, tx, w)
			if err != nil {
				return err // refused: the batch stays, tried again in a minute
			}
			f := &out.Flow[len(out.Flow)-1]
			f.RunID, f.DueAt = &r.ID, nil
			started(r)
		}
		return nil
	}
	return fmt.Errorf("unknown flow control %q", t.kind)
}

// flowWindow returns the open window of t's key, opening one when there is none.
// A window that is due but not fired yet (no pass has come by), or a batch that
// the event (size bytes) would take over maxBatchBytes, is fired first (fired is
// told) and the event opens the next one.
func (s *Store) flowWindow(ctx context.Context, tx *sqlx.Tx, t *triggerStart, labels any, eventID string, size int,
	fired func(*flowPending, *Run)) (*flowPending, error) {
	var w flowPending
	err := tx.GetContext(ctx, &w, sqlFlowWindow, t.workflow, t.index, t.kind, t.key)
	full := t.kind == FlowBatch && w.Events > 0 && w.Bytes+int64(size) > maxBatchBytes
	if err == nil && (full || w.Due != nil && *w.Due) {
		var refused *startRefused
		if r, ferr := s.firePending(ctx, tx, &w); ferr == nil {
			fired(&w, r)
			err = sql.ErrNoRows
		} else if !errors.As(ferr, &refused) {
			return nil, ferr
		}
		// Else it stays open (tried again in a minute) and takes the event.
	}
	if err == nil {
		return &w, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, err
	}
	var first time.Duration
	if t.kind == FlowDebounce {
		first, _ = time.ParseDuration(t.entry.Debounce.Period)
	} else {
		first, _ = time.ParseDuration(t.entry.Batch.Timeout)
	}
	w = flowPending{}
	if err := tx.GetContext(ctx, &w, sqlFlowWindowOpen, t.kind, t.workflow, t.index, t.key, t.version, labels,
		t.entry.Priority, nil, eventID, first.Seconds()); err != nil {
		return nil, err
	}
	return &w, nil
}

// flowCancel is a run a singleton's cancel_other cancels.
type flowCancel struct {
	run    uuid.UUID
	reason string
	start  *triggerStart
}

// EventFlowFireParams configure one pass of EventFlowFire.
type EventFlowFireParams struct {
	// Limit is how many windows, and how many queued starts, one pass takes;
	// default 50.
	Limit int
}

// EventFlowFireResult is what one pass did.
type EventFlowFireResult struct {
	// Started counts the runs started, by kind: debounce, batch, queue.
	Started map[string]int
	// Taken is how many rows the pass took (windows and queued starts); Busy
	// how many of them it left because an event held their key.
	Taken, Busy int
	// NextDue is the earliest due window after the pass; nil when none.
	NextDue *time.Time
	// Failed holds an error per window whose run could not be created (it is
	// tried again in a minute) and per queued start dropped for it.
	Failed []error
}

// EventFlowFire is one pass of the flow firer (maintenance.EventFlowFirer): in
// one transaction it takes up to p.Limit due debounce and batch windows and up to
// p.Limit queued singleton starts whose key's run has ended, each FOR UPDATE SKIP
// LOCKED (another server's pass takes others: each is started once), tries its
// key's lock (a key an event holds is left for the next pass), starts its run and
// deletes it.
func (s *Store) EventFlowFire(ctx context.Context, p *EventFlowFireParams) (*EventFlowFireResult, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 50
	}
	var res EventFlowFireResult
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		res = EventFlowFireResult{Started: map[string]int{}}
		var rows []flowPending
		if err := tx.SelectContext(ctx, &rows, sqlFlowDue, limit); err != nil {
			return err
		}
		var queued []flowPending
		if err := tx.SelectContext(ctx, &queued, sqlFlowQueueDue, limit); err != nil {
			return err
		}
		rows = append(rows, queued...)
		res.Taken = len(rows)
		for i := range rows {
			w := &rows[i]
			var got bool
			if err := tx.GetContext(ctx, &got, sqlFlowTryLock, flowLockName(w.lockKind(), w.Workflow, w.Trigger, w.Key)); err != nil {
				return err
			}
			if !got {
				res.Busy++
				continue
			}
			var err error
			if w.Kind == FlowQueue {
				// Checks the key's run again, and starts the queue's head.
				var fired *flowPending
				if _, fired, err = s.singletonBusy(ctx, tx, w.Workflow, w.Key); err == nil && fired != nil {
					res.Started[FlowQueue]++
				}
			} else {
				_, err = s.firePending(ctx, tx, w)
				if err == nil {
					res.Started[w.Kind]++
				}
			}
			if err != nil {
				var refused *startRefused
				if !errors.As(err, &refused) {
					return err
				}
				res.Failed = append(res.Failed, fmt.Errorf("%s of %s %s key %q: %w", w.Kind, w.Workflow,
					fmt.Sprintf("triggers[%d]", w.Trigger), w.Key, err))
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("fire event flow: %w", err)
	}
	var next sql.NullTime
	if err := s.db.GetContext(ctx, &next, sqlFlowNextDue); err != nil {
		return nil, fmt.Errorf("next event flow due: %w", translateError(err))
	}
	if next.Valid {
		res.NextDue = &next.Time
	}
	if res.Started[FlowDebounce]+res.Started[FlowBatch]+res.Started[FlowQueue] > 0 {
		s.wakes.wake()
	}
	return &res, nil
}

// EventSingletonsForget deletes up to limit rows of singleton keys whose run has
// ended (or is gone) and that queue nothing: a key's next event finds no run the
// same as an ended one. A key an event holds is kept for a later call. It returns
// how many it deleted.
func (s *Store) EventSingletonsForget(ctx context.Context, limit int) (int, error) {
	var n int64
	err := s.retrying(ctx, func() error {
		res, err := s.db.ExecContext(ctx, sqlSingletonsEnded, limit)
		if err != nil {
			return translateError(err)
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("forget ended singleton keys: %w", err)
	}
	return int(n), nil
}

// lockKind is the kind whose key lock guards the row: a queued start's is its
// singleton's.
func (p *flowPending) lockKind() string {
	if p.Kind == FlowQueue {
		return FlowSingleton
	}
	return p.Kind
}
