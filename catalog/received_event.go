package catalog

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/cairnrun/cairn/expr"
)

// Received events (docs/events.md): POST /v1/events stores an event and, in the
// same transaction, starts the runs whose triggers it matches, completes the
// wait_for_event steps it matches and cancels the runs whose cancel_on it
// matches. The expressions (a trigger's if and input, a wait's and a cancel_on's
// match) are evaluated here, in Go, with expr.EventEnv.
//
// Locks: an event first takes the transaction-scoped advisory lock of its name,
// shared; a wait_for_event step that suspends takes it exclusively before it looks
// at the events it may take (EventWaitSuspend). So an event stored while a step
// suspends is either seen by the step (buffered) or sees the step waiting: never
// neither. Then an event takes the locks of its triggers' flow keys (singleton,
// debounce, batch: event_flow.go), all at once, in the order of their names; then
// the runs' locks in the lock order of catalog/sql/run_control.sql: the shared
// advisory locks of the runs whose waits it completes (cairn_runs_share), each
// step, its run's row.

const (
	sqlEventInsert = `
INSERT INTO received_events (id, name, data, request_hash, actor)
VALUES ($1, $2, $3, encode(sha256(convert_to($2 || E'\n' || ($3::jsonb)::text, 'UTF8')), 'hex'), $4)
ON CONFLICT (id) DO NOTHING
RETURNING seq, received_at`

	sqlEventSame = `
SELECT request_hash = encode(sha256(convert_to($2 || E'\n' || ($3::jsonb)::text, 'UTF8')), 'hex') AS same
FROM received_events WHERE id = $1`

	sqlEventSelect = `SELECT seq, id, name, data, actor, received_at, outcome FROM received_events`

	sqlEventNameLockShared = `SELECT pg_advisory_xact_lock_shared(hashtextextended('cairn_event:' || $1, 0))`
	sqlEventNameLock       = `SELECT pg_advisory_xact_lock(hashtextextended('cairn_event:' || $1, 0))`

	// sqlEventTriggers: the latest versions with a trigger on event $1.
	sqlEventTriggers = `
SELECT a.workflow, a.version, v.definition -> 'triggers' AS entries
FROM workflow_aliases a JOIN workflow_versions v ON v.workflow = a.workflow AND v.version = a.version
WHERE a.alias = 'latest' AND v.definition -> 'triggers' @> jsonb_build_array(jsonb_build_object('event', $1::text))
ORDER BY a.workflow`

	// sqlEventWaiters: the steps waiting for event $1 of runs created before it
	// ($2), with what their match sees.
	sqlEventWaiters = `
SELECT s.run_id, s.key, coalesce(s.map_parent, s.key) AS def_key, r.workflow, r.version, r.input
FROM steps s JOIN runs r ON r.id = s.run_id
WHERE s.status = 'suspended' AND s.wait_kind = 'event' AND s.wait_name = $1 AND r.created_at <= $2
ORDER BY s.run_id, s.key`

	// sqlEventWaitersKeyed: sqlEventWaiters, of the steps whose key is among $3
	// and of those without a key, each read from its index (00093): one
	// statement with "wait_key IS NULL OR wait_key = ANY($3)" was planned as a
	// read of every step waiting for the name.
	sqlEventWaitersKeyed = `
SELECT s.run_id, s.key, coalesce(s.map_parent, s.key) AS def_key, r.workflow, r.version, r.input
FROM steps s JOIN runs r ON r.id = s.run_id
WHERE s.status = 'suspended' AND s.wait_kind = 'event' AND s.wait_name = $1 AND r.created_at <= $2
  AND s.wait_key IS NOT NULL AND s.wait_key = ANY($3::text[])
UNION ALL
SELECT s.run_id, s.key, coalesce(s.map_parent, s.key) AS def_key, r.workflow, r.version, r.input
FROM steps s JOIN runs r ON r.id = s.run_id
WHERE s.status = 'suspended' AND s.wait_kind = 'event' AND s.wait_name = $1 AND r.created_at <= $2
  AND s.wait_key IS NULL
ORDER BY 1, 2`

	// sqlEventWaitMatches: the match expressions of the wait_for_event steps of
	// every version that wait for event $1.
	sqlEventWaitMatches = `
SELECT DISTINCT coalesce(st -> 'wait_for_event' ->> 'match', '') AS match
FROM workflow_versions v, jsonb_array_elements(v.definition -> 'steps') st
WHERE v.definition -> 'steps' @> jsonb_build_array(jsonb_build_object('wait_for_event', jsonb_build_object('event', $1::text)))
  AND st -> 'wait_for_event' ->> 'event' = $1`

	sqlEventRunInput = `SELECT input FROM runs WHERE id = $1`

	// sqlEventWaitKey records a suspended step's key (00092), when it changed.
	sqlEventWaitKey = `UPDATE steps SET wait_key = $3 WHERE run_id = $1 AND key = $2 AND wait_key IS DISTINCT FROM $3`

	// sqlEventCancelVersions: the versions with a cancel_on for event $1.
	sqlEventCancelVersions = `
SELECT v.workflow, v.version, v.definition -> 'cancel_on' AS entries
FROM workflow_versions v
WHERE v.definition -> 'cancel_on' @> jsonb_build_array(jsonb_build_object('event', $1::text))
ORDER BY v.workflow, v.version`

	sqlEventCancelRuns = `
SELECT id, input FROM runs
WHERE workflow = $1 AND version = $2 AND status IN ('pending', 'running', 'paused') AND created_at <= $3
ORDER BY id`

	sqlEventStepDefinition = `
SELECT st FROM workflow_versions v, jsonb_array_elements(v.definition -> 'steps') st
WHERE v.workflow = $1 AND v.version = $2 AND st ->> 'key' = $3`

	sqlEventStepLock = `
SELECT true FROM steps WHERE run_id = $1 AND key = $2 AND status = 'suspended' AND wait_kind = 'event' FOR UPDATE`

	sqlEventTake = `INSERT INTO event_takes (run_id, step_key, event_seq) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`

	sqlEventResolve = `SELECT cairn_step_resolve($1, $2, 'succeeded', $3, NULL, 'event')`

	sqlEventOutcome = `UPDATE received_events SET outcome = $2 WHERE seq = $1`

	// sqlEventBuffered: the events of name $3 received since run $1 was created
	// that its step $2 has not taken, oldest first, with the run's input.
	sqlEventBuffered = `
SELECT e.seq, e.id, e.name, e.data, e.actor, e.received_at, e.outcome, r.input AS run_input
FROM runs r JOIN received_events e ON e.name = $3 AND e.received_at >= r.created_at
WHERE r.id = $1
  AND NOT EXISTS (SELECT 1 FROM event_takes t WHERE t.run_id = $1 AND t.step_key = $2 AND t.event_seq = e.seq)
  AND e.seq > $5
ORDER BY e.seq
LIMIT $4`
)

// maxBufferedEvents is how many events a suspending step reads at a time: it
// reads pages of them, oldest first, until one matches or none are left.
const maxBufferedEvents = 10_000

// ReceivedEvent is an event stored by EventIngest.
type ReceivedEvent struct {
	Seq  int64  `db:"seq" json:"-"`
	ID   string `db:"id" json:"id"`
	Name string `db:"name" json:"name"`
	// Data is the event's JSON, or a {"$blob": …} reference.
	Data       JSON         `db:"data" json:"data"`
	Actor      string       `db:"actor" json:"actor"`
	ReceivedAt time.Time    `db:"received_at" json:"received_at"`
	Outcome    EventOutcome `db:"outcome" json:"outcome"`
}

// EventOutcome is what an event did.
type EventOutcome struct {
	Started  []EventStarted `json:"started"`
	Resumed  []EventResumed `json:"resumed"`
	Canceled []uuid.UUID    `json:"canceled"`
	// Flow is what the flow control of its triggers (singleton, debounce,
	// batch) did with it: an entry per such trigger that did not simply start
	// its run (event_flow.go).
	Flow []EventFlow `json:"flow,omitempty"`
	// Errors are the expressions that failed on the event (each blocks only its
	// own trigger, wait or cancel_on).
	Errors []EventError `json:"errors,omitempty"`
}

// EventStarted is a run an event's trigger started.
type EventStarted struct {
	RunID    uuid.UUID `json:"run_id"`
	Workflow string    `json:"workflow"`
	Version  int       `json:"version"`
	Trigger  int       `json:"trigger"`
}

// EventResumed is a wait_for_event step an event completed.
type EventResumed struct {
	RunID uuid.UUID `json:"run_id"`
	Step  string    `json:"step"`
}

// EventError is an expression (or a start) that failed on an event.
type EventError struct {
	Workflow string     `json:"workflow"`
	Version  int        `json:"version"`
	Where    string     `json:"where"` // triggers[0].if, steps.pay.match, cancel_on[1].match
	RunID    *uuid.UUID `json:"run_id,omitempty"`
	Message  string     `json:"message"`
}

// Scan reads the outcome column.
func (o *EventOutcome) Scan(src any) error {
	b, ok := src.([]byte)
	if !ok {
		return fmt.Errorf("event outcome: unexpected %T", src)
	}
	return json.Unmarshal(b, o)
}

// EventIngestParams is an event to store.
type EventIngestParams struct {
	// ID identifies the event: the same ID again is the same event. Empty: a new
	// one is made.
	ID   string
	Name string
	// Data is the event's JSON (inline or a $blob reference).
	Data  json.RawMessage
	Actor string
}

// eventEntry is a trigger or cancel_on entry of a definition, and wait is a
// wait_for_event step's.
type eventEntry struct {
	Event    string            `json:"event"`
	If       string            `json:"if"`
	Input    string            `json:"input"`
	Match    string            `json:"match"`
	Labels   map[string]string `json:"labels"`
	Priority *int              `json:"priority"`
	triggerFlow
}

type eventStepDefinition struct {
	WaitForEvent *eventEntry `json:"wait_for_event"`
}

// view is how expressions and a waiting step's output see the event.
func (e *ReceivedEvent) view() json.RawMessage {
	b, _ := json.Marshal(map[string]any{"id": e.ID, "name": e.Name, "data": json.RawMessage(e.Data),
		"received_at": e.ReceivedAt.UTC().Format(time.RFC3339Nano)})
	return b
}

// eventMatch evaluates a match or if expression (true when src is empty).
func eventMatch(ctx context.Context, src string, ev, input json.RawMessage) (bool, error) {
	if src == "" {
		return true, nil
	}
	prg, err := expr.EventEnv.Compile(src)
	if err != nil {
		return false, err
	}
	if len(input) == 0 {
		input = json.RawMessage("null")
	}
	return prg.EvalBool(ctx, expr.Vars{expr.Event: ev, expr.Input: input})
}

// EventIngest stores an event and does what it causes, in one transaction (see
// the top of this file): it returns the stored event with its outcome, and
// duplicate when the ID was stored before with the same name and data (nothing
// is done again; the first outcome is returned). ErrIdempotencyMismatch when the
// ID was stored with another name or data.
func (s *Store) EventIngest(ctx context.Context, p *EventIngestParams) (ev *ReceivedEvent, duplicate bool, err error) {
	if p.ID == "" {
		id, err := uuid.NewV7()
		if err != nil {
			return nil, false, fmt.Errorf("new event id: %w", err)
		}
		p.ID = id.String()
	}
	err = s.inTx(ctx, func(tx *sqlx.Tx) error {
		ev, duplicate = &ReceivedEvent{ID: p.ID, Name: p.Name, Data: JSON(p.Data), Actor: p.Actor}, false
		err := tx.QueryRowxContext(ctx, sqlEventInsert, p.ID, p.Name, string(p.Data), p.Actor).Scan(&ev.Seq, &ev.ReceivedAt)
		if errors.Is(err, sql.ErrNoRows) {
			var same bool
			if err := tx.GetContext(ctx, &same, sqlEventSame, p.ID, p.Name, string(p.Data)); err != nil {
				return err
			}
			if !same {
				return fmt.Errorf("%w: event %q was received with another name or data", ErrIdempotencyMismatch, p.ID)
			}
			duplicate = true
			return tx.GetContext(ctx, ev, sqlEventSelect+` WHERE id = $1`, p.ID)
		}
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, sqlEventNameLockShared, p.Name); err != nil {
			return err
		}
		out, err := s.eventEffects(ctx, tx, ev)
		if err != nil {
			return err
		}
		ev.Outcome = *out
		b, err := json.Marshal(out)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, sqlEventOutcome, ev.Seq, string(b))
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("event %s: %w", p.Name, err)
	}
	if !duplicate && (len(ev.Outcome.Started) > 0 || len(ev.Outcome.Resumed) > 0 || len(ev.Outcome.Flow) > 0) {
		s.wakes.wake()
	}
	return ev, duplicate, nil
}

// eventEffects starts, resumes and cancels what ev matches, in tx.
func (s *Store) eventEffects(ctx context.Context, tx *sqlx.Tx, ev *ReceivedEvent) (*EventOutcome, error) {
	out := &EventOutcome{Started: []EventStarted{}, Resumed: []EventResumed{}, Canceled: []uuid.UUID{}}
	view := ev.view()
	fail := func(wf string, version int, where string, run *uuid.UUID, err error) {
		out.Errors = append(out.Errors, EventError{Workflow: wf, Version: version, Where: where, RunID: run, Message: err.Error()})
	}
	// Triggers of the latest versions: what each matching one starts, then the
	// locks of the keys of those with flow control (event_flow.go), then the
	// starts.
	var triggers []struct {
		Workflow string `db:"workflow"`
		Version  int    `db:"version"`
		Entries  JSON   `db:"entries"`
	}
	if err := tx.SelectContext(ctx, &triggers, sqlEventTriggers, ev.Name); err != nil {
		return nil, err
	}
	var starts []triggerStart
	for _, t := range triggers {
		var entries []eventEntry
		if err := json.Unmarshal(t.Entries, &entries); err != nil {
			return nil, fmt.Errorf("triggers of %s v%d: %w", t.Workflow, t.Version, err)
		}
		for i, e := range entries {
			if e.Event != ev.Name {
				continue
			}
			ts := triggerStart{workflow: t.Workflow, version: t.Version, index: i, entry: e}
			ok, err := eventMatch(ctx, e.If, view, nil)
			if err != nil {
				fail(t.Workflow, t.Version, ts.where()+".if", nil, err)
				continue
			}
			if !ok {
				continue
			}
			ts.input = json.RawMessage(ev.Data)
			if e.Input != "" {
				prg, err := expr.EventEnv.Compile(e.Input)
				if err == nil {
					ts.input, err = prg.Eval(ctx, expr.Vars{expr.Event: view, expr.Input: json.RawMessage("null")})
				}
				if err != nil {
					fail(t.Workflow, t.Version, ts.where()+".input", nil, err)
					continue
				}
			}
			var keySrc string
			ts.kind, keySrc = e.flowKind()
			if ts.key, err = flowKeyOf(ctx, keySrc, view); err != nil {
				fail(t.Workflow, t.Version, fmt.Sprintf("%s.%s.key", ts.where(), ts.kind), nil, err)
				continue
			}
			starts = append(starts, ts)
		}
	}
	if err := flowLockAll(ctx, tx, starts); err != nil {
		return nil, err
	}
	var cancels []flowCancel
	for i := range starts {
		ts := &starts[i]
		var err error
		if ts.kind != "" {
			err = s.flowApply(ctx, tx, ev, view, ts, out, &cancels)
		} else {
			run := &flowRun{workflow: ts.workflow, version: ts.version, input: ts.input, labels: ts.entry.Labels,
				priority: ts.entry.Priority}
			var r *Run
			if r, err = run.start(ctx, s, tx); err == nil {
				out.Started = append(out.Started, EventStarted{RunID: r.ID, Workflow: ts.workflow, Version: ts.version, Trigger: ts.index})
			}
		}
		var refused *startRefused
		if errors.As(err, &refused) {
			fail(ts.workflow, ts.version, ts.where(), nil, refused.err)
		} else if err != nil {
			return nil, err
		}
	}

	// Waits.
	var waiters []struct {
		RunID    uuid.UUID `db:"run_id"`
		Key      string    `db:"key"`
		DefKey   string    `db:"def_key"`
		Workflow string    `db:"workflow"`
		Version  int       `db:"version"`
		Input    JSON      `db:"input"`
	}
	if keys, ok, err := eventWaitKeys(ctx, tx, ev.Name, view); err != nil {
		return nil, err
	} else if ok {
		err = tx.SelectContext(ctx, &waiters, sqlEventWaitersKeyed, ev.Name, ev.ReceivedAt, pq.StringArray(keys))
		if err != nil {
			return nil, err
		}
	} else if err := tx.SelectContext(ctx, &waiters, sqlEventWaiters, ev.Name, ev.ReceivedAt); err != nil {
		return nil, err
	}
	defs := map[string]string{} // workflow/version/key → match
	var matched []EventResumed
	for _, w := range waiters {
		ck := fmt.Sprintf("%s/%d/%s", w.Workflow, w.Version, w.DefKey)
		match, ok := defs[ck]
		if !ok {
			var raw JSON
			if err := tx.GetContext(ctx, &raw, sqlEventStepDefinition, w.Workflow, w.Version, w.DefKey); err != nil && !errors.Is(err, sql.ErrNoRows) {
				return nil, err
			}
			var def eventStepDefinition
			if len(raw) > 0 {
				if err := json.Unmarshal(raw, &def); err != nil {
					return nil, err
				}
			}
			if def.WaitForEvent != nil {
				match = def.WaitForEvent.Match
			}
			defs[ck] = match
		}
		ok, err := eventMatch(ctx, match, view, json.RawMessage(w.Input))
		if err != nil {
			id := w.RunID
			fail(w.Workflow, w.Version, fmt.Sprintf("steps.%s.wait_for_event.match", w.DefKey), &id, err)
			continue
		}
		if ok {
			matched = append(matched, EventResumed{RunID: w.RunID, Step: w.Key})
		}
	}
	if len(matched) > 0 {
		ids := make([]string, 0, len(matched))
		for _, m := range matched {
			ids = append(ids, m.RunID.String())
		}
		slices.Sort(ids)
		if _, err := tx.ExecContext(ctx, `SELECT cairn_runs_share($1::uuid[])`, pq.StringArray(slices.Compact(ids))); err != nil {
			return nil, err
		}
		for _, m := range matched {
			var waiting bool
			if err := tx.GetContext(ctx, &waiting, sqlEventStepLock, m.RunID, m.Step); err != nil {
				if errors.Is(err, sql.ErrNoRows) {
					continue // ended meanwhile (a timeout, a cancel)
				}
				return nil, err
			}
			if _, err := tx.ExecContext(ctx, sqlEventTake, m.RunID, m.Step, ev.Seq); err != nil {
				return nil, err
			}
			if _, err := tx.ExecContext(ctx, sqlEventResolve, m.RunID, m.Step, string(view)); err != nil {
				return nil, err
			}
			out.Resumed = append(out.Resumed, m)
		}
	}

	// The runs singletons' cancel_other replace (their runs started above).
	for _, c := range cancels {
		err := savepoint(ctx, tx, func() error {
			_, err := tx.ExecContext(ctx, sqlRunCancel, c.run, c.reason)
			return err
		})
		if err != nil {
			if terr := translateError(err); errors.Is(terr, ErrRunState) || errors.Is(terr, ErrNotFound) {
				continue // ended meanwhile
			} else if errors.Is(terr, ErrRetryable) || ctx.Err() != nil {
				return nil, terr
			}
			id := c.run
			fail(c.start.workflow, c.start.version, c.start.where()+".singleton", &id, translateError(err))
			continue
		}
		out.Canceled = append(out.Canceled, c.run)
	}

	// cancel_on.
	var cancelVersions []struct {
		Workflow string `db:"workflow"`
		Version  int    `db:"version"`
		Entries  JSON   `db:"entries"`
	}
	if err := tx.SelectContext(ctx, &cancelVersions, sqlEventCancelVersions, ev.Name); err != nil {
		return nil, err
	}
	for _, c := range cancelVersions {
		var entries []eventEntry
		if err := json.Unmarshal(c.Entries, &entries); err != nil {
			return nil, fmt.Errorf("cancel_on of %s v%d: %w", c.Workflow, c.Version, err)
		}
		var runs []struct {
			ID    uuid.UUID `db:"id"`
			Input JSON      `db:"input"`
		}
		if err := tx.SelectContext(ctx, &runs, sqlEventCancelRuns, c.Workflow, c.Version, ev.ReceivedAt); err != nil {
			return nil, err
		}
		for _, r := range runs {
			for i, e := range entries {
				if e.Event != ev.Name {
					continue
				}
				ok, err := eventMatch(ctx, e.Match, view, json.RawMessage(r.Input))
				if err != nil {
					id := r.ID
					fail(c.Workflow, c.Version, fmt.Sprintf("cancel_on[%d].match", i), &id, err)
					continue
				}
				if !ok {
					continue
				}
				err = savepoint(ctx, tx, func() error {
					_, err := tx.ExecContext(ctx, sqlRunCancel, r.ID, fmt.Sprintf("event %s (%s) matched cancel_on[%d]", ev.Name, ev.ID, i))
					return err
				})
				if err != nil {
					if terr := translateError(err); errors.Is(terr, ErrRunState) || errors.Is(terr, ErrNotFound) {
						break // ended meanwhile
					} else if errors.Is(terr, ErrRetryable) || ctx.Err() != nil {
						return nil, terr
					}
					id := r.ID
					fail(c.Workflow, c.Version, fmt.Sprintf("cancel_on[%d]", i), &id, translateError(err))
					break
				}
				out.Canceled = append(out.Canceled, r.ID)
				break
			}
		}
	}
	return out, nil
}

// eventWaitKeys returns the keys of the event (view) by which the steps waiting
// for its name are looked up (see waitKey): one per wait_for_event match on name
// that is an equality. False when a match's event side has no key on this
// event (a field it lacks, an object): the event is then compared with every
// waiting step, as before keys, so that each match fails or holds as it says.
func eventWaitKeys(ctx context.Context, tx *sqlx.Tx, name string, view json.RawMessage) ([]string, bool, error) {
	var matches []string
	if err := tx.SelectContext(ctx, &matches, sqlEventWaitMatches, name); err != nil {
		return nil, false, err
	}
	keys := []string{}
	for _, m := range matches {
		q := expr.EventEnv.EqualityOf(m, expr.Event)
		if q == nil {
			continue // its steps have no key: they are all compared
		}
		k, ok := q.SideKey(ctx, expr.Vars{expr.Event: view, expr.Input: nil})
		if !ok {
			return nil, false, nil
		}
		keys = append(keys, k)
	}
	return keys, true, nil
}

// waitKey returns the key of a step of run waiting with match: the other side
// of the match's equality (expr.Equality) on the run's input, by which an event
// of the name finds the step (eventWaitKeys); false when the match has no
// equality. A NULL key (the other side has no key on this input) leaves the
// step to be compared with every event of its name.
func (s *Store) waitKey(ctx context.Context, run uuid.UUID, match string) (sql.NullString, bool, error) {
	q := expr.EventEnv.EqualityOf(match, expr.Event)
	if q == nil {
		return sql.NullString{}, false, nil
	}
	var input JSON
	if err := s.db.GetContext(ctx, &input, sqlEventRunInput, run); err != nil {
		return sql.NullString{}, false, translateError(err)
	}
	var wk sql.NullString
	wk.String, wk.Valid = q.OtherKey(ctx, expr.Vars{expr.Event: nil, expr.Input: json.RawMessage(input)})
	return wk, true, nil
}

// ReceivedEventGet returns the event of id; ErrNotFound if none.
func (s *Store) ReceivedEventGet(ctx context.Context, id string) (*ReceivedEvent, error) {
	var ev ReceivedEvent
	if err := s.db.GetContext(ctx, &ev, sqlEventSelect+` WHERE id = $1`, id); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("event %q: %w", id, ErrNotFound)
		}
		return nil, fmt.Errorf("event %q: %w", id, translateError(err))
	}
	return &ev, nil
}

// ReceivedEventListParams filter ReceivedEventList.
type ReceivedEventListParams struct {
	// Name, when set, is the events' name.
	Name string
	// Since, when set, keeps the events received at or after it.
	Since time.Time
	// Before, when positive, keeps the events stored before that sequence number
	// (the cursor of the next page).
	Before int64
	Limit  int
	// Namespace, when not empty, keeps its events only (package namespace).
	Namespace string
}

// ReceivedEventList lists received events, newest first.
func (s *Store) ReceivedEventList(ctx context.Context, p ReceivedEventListParams) ([]ReceivedEvent, error) {
	if p.Limit <= 0 || p.Limit > 1000 {
		p.Limit = 100
	}
	var out []ReceivedEvent
	err := s.db.SelectContext(ctx, &out, sqlEventSelect+`
WHERE ($1 = '' OR name = $1) AND ($2::timestamptz IS NULL OR received_at >= $2) AND ($3 <= 0 OR seq < $3)
  AND ($5::text IS NULL OR cairn_namespace(name) = $5::text)
ORDER BY seq DESC LIMIT $4`, p.Name, nullTime(p.Since), p.Before, p.Limit, nullString(p.Namespace))
	if err != nil {
		return nil, fmt.Errorf("list events: %w", translateError(err))
	}
	return out, nil
}

// EventWait is a wait_for_event step's wait: Wait (kind WaitEvent, Name the
// event's name) and its match expression.
type EventWait struct {
	Wait
	Match string
}

// EventWaitSuspend suspends a claimed wait_for_event step, fenced by its lease,
// unless an event it matches was received since its run was created and not taken
// by it before: then the step takes the oldest such event and succeeds with it
// (step.suspended, then step.resumed). See the top of this file for why the
// event name's lock comes first. ErrLeaseLost as StepSuspend.
func (s *Store) EventWaitSuspend(ctx context.Context, l Lease, w EventWait) (took bool, err error) {
	w.Kind = WaitEvent
	// The key, read before the event name's lock is taken (a run's input does
	// not change), is recorded as the step suspends.
	wk, keyed, err := s.waitKey(ctx, l.RunID, w.Match)
	if err != nil {
		return false, fmt.Errorf("wait for event %s: step %s/%s: %w", w.Name, l.RunID, l.Key, err)
	}
	err = s.inTx(ctx, func(tx *sqlx.Tx) error {
		took = false
		if _, err := tx.ExecContext(ctx, sqlEventNameLock, w.Name); err != nil {
			return err
		}
		var take *ReceivedEvent
		for after := int64(0); take == nil; {
			var buffered []struct {
				ReceivedEvent
				RunInput JSON `db:"run_input"`
			}
			if err := tx.SelectContext(ctx, &buffered, sqlEventBuffered, l.RunID, l.Key, w.Name, maxBufferedEvents, after); err != nil {
				return err
			}
			for i := range buffered {
				ok, err := eventMatch(ctx, w.Match, buffered[i].view(), json.RawMessage(buffered[i].RunInput))
				if err != nil {
					s.cfg.Logger.WarnContext(ctx, "a buffered event's match failed", "run", l.RunID, "step", l.Key,
						"event", buffered[i].ID, "error", err)
					continue
				}
				if ok {
					take = &buffered[i].ReceivedEvent
					break
				}
			}
			if len(buffered) < maxBufferedEvents {
				break
			}
			after = buffered[len(buffered)-1].Seq
		}
		if err := suspendTx(ctx, tx, l, w.Wait); err != nil {
			return err
		}
		if take == nil {
			if keyed {
				_, err := tx.ExecContext(ctx, sqlEventWaitKey, l.RunID, l.Key, wk)
				return err
			}
			return nil
		}
		if _, err := tx.ExecContext(ctx, sqlEventTake, l.RunID, l.Key, take.Seq); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, sqlEventResolve, l.RunID, l.Key, string(take.view())); err != nil {
			return err
		}
		took = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("wait for event %s: step %s/%s: %w", w.Name, l.RunID, l.Key, err)
	}
	return took, nil
}
