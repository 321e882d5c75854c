package catalog

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
)

// ErrIdempotencyMismatch means an idempotency key was used before with a different
// request. It wraps ErrConflict.
var ErrIdempotencyMismatch = fmt.Errorf("%w: idempotency key was used with a different request", ErrConflict)

// ErrRunFinished means the run is already terminal (cancel of a finished run). It
// wraps ErrConflict.
var ErrRunFinished = fmt.Errorf("%w: run already finished", ErrConflict)

const (
	runColumns = `id, workflow, version, status, input, error, revision, steps_total,
steps_remaining, created_at, started_at, finished_at, rerun_of, rerun_from_step, pause_reason,
labels, parent_id, parent_step`

	// An expired key ($5: the TTL in seconds; 0: keys never expire) is taken over
	// as if it were new.
	sqlIdempotencyInsert = `
INSERT INTO idempotency_keys (scope, key, request_hash, resource_id) VALUES ($1, $2, $3, $4)
ON CONFLICT (scope, key) DO UPDATE
SET request_hash = EXCLUDED.request_hash, resource_id = EXCLUDED.resource_id, created_at = now()
WHERE $5 > 0 AND idempotency_keys.created_at <= now() - make_interval(secs => $5)`

	sqlIdempotencyGet = `
SELECT request_hash, resource_id FROM idempotency_keys WHERE scope = $1 AND key = $2`

	// sqlRunCreate makes a run in one statement (atomic on its own): it resolves the
	// version ($3; when 0, the one alias $7 names, latest when $7 is ''), then
	// inserts the run (input $4, labels $5, parent $6), its steps (the version's
	// layout: parallel arrays, needs comma-joined, keys cannot hold commas; their
	// concurrency limits and keys from $8, see flowKeys), the
	// DAG's edges, the run.created event (seq 1), and wakes the dispatchers at its
	// commit (sqlRunCreateWake). A run of a namespace other than default is refused
	// over the namespace's runs_per_minute quota (q: cairn_run_quota, QuotaError),
	// and its steps carry the namespace (quota_ns: quota.go). Foreign keys are checked at the end of the
	// statement, when all rows exist. No row back means no such version.
	//
	// A run of a paused workflow is created paused (pause_reason workflow, its steps
	// held). The workflow's row is read FOR KEY SHARE: cairn_workflow_pause locks it
	// FOR UPDATE before it pauses the workflow's runs, so a run is either committed
	// before that scan or sees the workflow paused.
	//
	// sqlRunCreateQuiet is sqlRunCreate that wakes no one: RunCreate takes it
	// when other creations are under way in this process, and wakes the
	// dispatchers after its commit (Store.wakes). A NOTIFY in each statement
	// made concurrent creations commit one at a time (see waker).
	sqlRunCreate      = sqlRunCreateHead + sqlRunCreateTail + sqlRunCreateWake
	sqlRunCreateQuiet = sqlRunCreateHead + sqlRunCreateTail
	sqlRunCreateWake  = ` CROSS JOIN LATERAL (SELECT cairn_wake()) AS wake`

	// sqlRunCreateFlowFree is sqlRunCreate for a version none of whose steps or
	// failure handlers has flow settings (limits, priority, runs_on,
	// queue_timeout: flowKeys), the common case: it creates nothing (no row) when
	// the version it resolves has any, so that a run is created in one round trip
	// without flowKeys' read first. sqlRunCreateFlowFreeQuiet wakes no one.
	sqlRunCreateFlowFree      = sqlRunCreateFlowFreeQuiet + sqlRunCreateWake
	sqlRunCreateFlowFreeQuiet = sqlRunCreateHead + `
      AND jsonb_array_length(v.flow_steps) = 0
      AND jsonb_array_length(coalesce(v.flow_handlers, '[]')) = 0` + sqlRunCreateTail

	// sqlRunCreateHead resolves the version: the alias by a subquery, not by
	// cairn_alias_version, a SQL function whose statement PostgreSQL plans again
	// at every call (about 50 µs of create-run's 0.5 ms).
	sqlRunCreateHead = `
WITH w AS (
    SELECT w.paused FROM workflows w WHERE w.name = $2 FOR KEY SHARE
), v AS (
    SELECT v.workflow, v.version,
           v.step_keys AS keys, v.step_needs AS needs, v.step_max_attempts AS maxes,
           v.step_on_exhausted AS exhausted, v.step_after AS afters, v.step_when AS whens,
           v.step_compensate AS comps, v.run_timeout_ms
    FROM workflow_versions v
    WHERE v.workflow = $2
      AND v.version = CASE WHEN $3::integer = 0
                           THEN (SELECT a.version FROM workflow_aliases a
                                 WHERE a.workflow = $2 AND a.alias = coalesce(nullif($7::text, ''), 'latest'))
                           ELSE $3::integer END`
	sqlRunCreateTail = `
), q AS (
    -- the namespace's runs_per_minute quota (catalog/quota.go); none in default
    SELECT CASE WHEN strpos(v.workflow, '/') > 0 THEN cairn_run_quota(v.workflow) ELSE true END AS ok FROM v
), r AS (
    INSERT INTO runs (id, workflow, version, input, steps_total, steps_remaining, revision, status, pause_reason,
                      labels, parent_id, deadline_at, handler_flow)
    SELECT $1, v.workflow, v.version, $4, cardinality(v.keys), cardinality(v.keys), 1,
           CASE WHEN w.paused THEN 'paused' ELSE 'pending' END, CASE WHEN w.paused THEN 'workflow' END,
           $5, $6,
           coalesce($10::timestamptz, now() + make_interval(secs => v.run_timeout_ms / 1000.0)),
           $11::jsonb
    FROM v, w, q WHERE q.ok
    RETURNING ` + runColumns + `
), st AS (
    INSERT INTO steps (run_id, key, status, needs, deps_remaining, max_attempts, ready_at, on_exhausted, held,
                       trigger_rule, condition, compensate_attempts,
                       conc_name, conc_key, conc_limit, rate_name, rate_key, rate_limit, rate_per_s, priority, runs_on,
                       queue_timeout_s, quota_ns)
    SELECT $1, k, CASE WHEN n = '' THEN 'ready' ELSE 'waiting' END,
           coalesce(string_to_array(nullif(n, ''), ','), '{}'),
           coalesce(cardinality(string_to_array(nullif(n, ''), ',')), 0),
           m, CASE WHEN n = '' THEN now() END, coalesce(o, 'fail'), w.paused,
           coalesce(nullif(a, ''), 'all_succeeded'), CASE WHEN wh THEN 'pending' END, nullif(c, 0),
           $8::jsonb -> k ->> 'n', $8::jsonb -> k ->> 'k', ($8::jsonb -> k ->> 'l')::integer,
           $8::jsonb -> k ->> 'rn', $8::jsonb -> k ->> 'rk', ($8::jsonb -> k ->> 'rl')::integer,
           ($8::jsonb -> k ->> 'rp')::float8,
           coalesce($9::smallint, ($8::jsonb -> k ->> 'p')::smallint, 5),
           CASE WHEN $8::jsonb -> k ? 't' THEN ARRAY(SELECT jsonb_array_elements_text($8::jsonb -> k -> 't')) END,
           ($8::jsonb -> k ->> 'q')::float8, nullif(cairn_namespace(v.workflow), 'default')
    FROM v, w, unnest(v.keys, v.needs, v.maxes, v.exhausted, v.afters, v.whens, v.comps) AS s(k, n, m, o, a, wh, c)
), lk AS (
    -- the concurrency keys of the steps get a turn
    ` + sqlLimitKeysHead + `$8` + sqlLimitKeysTail + `
), ed AS (
    INSERT INTO step_edges (run_id, from_key, to_key)
    SELECT $1, n, s.k
    FROM v, unnest(v.keys, v.needs) AS s(k, ns), unnest(string_to_array(nullif(s.ns, ''), ',')) AS n
), ev AS (
    INSERT INTO events (run_id, seq, type, data)
    SELECT $1, 1, 'run.created', jsonb_build_object('workflow', v.workflow, 'version', v.version) FROM v
)
SELECT r.* -- the RETURNING list above
FROM r`

	sqlRunGet = `SELECT ` + runColumns + ` FROM runs WHERE id = $1`

	// sqlRunList reads a page of runs ($11 at most) matching runFilter, with the
	// inputs over $12 bytes left out, as stored or as JSON text, so that a large
	// input is never read whole: pg_column_size, the stored (possibly compressed)
	// size, is known without reading the value; only an input stored in at most
	// $12 bytes is turned into text to be measured.
	sqlRunList = `
SELECT r.id, r.workflow, r.version, r.status,
       CASE WHEN o.omitted THEN NULL ELSE r.input END AS input, o.omitted AS input_omitted,
       r.error, r.revision, r.steps_total, r.steps_remaining, r.created_at, r.started_at, r.finished_at,
       r.rerun_of, r.rerun_from_step, r.pause_reason, r.labels, r.parent_id, r.parent_step
FROM runs r CROSS JOIN LATERAL (
    SELECT CASE WHEN r.input IS NULL THEN false
                WHEN pg_column_size(r.input) > $12 THEN true
                ELSE octet_length(r.input::text) > $12 END AS omitted
) o
WHERE ` + runFilter + `
ORDER BY r.id DESC
LIMIT $11`

	// runFilter is the WHERE clause of RunListParams over runs r, which RunList
	// and RunCount share (runFilterArgs gives its parameters, $1 to $10).
	//
	// Every filter is "absent, or the condition": the statement is planned with its
	// parameters' values (lib/pq binds an unnamed statement), so an absent filter
	// folds away and the planner sees only the conditions given. Each is served by
	// an index (migrations 00001 and 00006):
	//   $1 workflow            runs_workflow_id_idx (workflow, id DESC)
	//   $2 status              runs_status_id_idx, runs_workflow_status_id_idx
	//   $4 labels (all)        runs_labels_idx, GIN on cairn_label_pairs(labels), 'key=value' texts,
	//                          of the runs with labels only (never empty when given)
	//   $5 version             runs_workflow_version_id_idx (workflow, version, id DESC)
	//   $6 error code          runs_error_code_idx ((error->'cause'->>'code'), id DESC) WHERE status = 'failed'
	//   $7 parent              runs_parent_id_idx (parent_id, id DESC) WHERE parent_id IS NOT NULL
	//   $8, $9 created_*       bounds on the primary key: run ids are UUIDv7, time-ordered
	//   $3 the cursor          a bound on the primary key, as $8 and $9
	//   $10 namespace          default: a condition on the rows the others find
	//                          (cairn_namespace, inlined); another: also
	//                          runs_namespace_created_idx, of namespaced runs only
	//                          (strpos(...) > 0 is its predicate), then a sort
	runFilter = `($1 = '' OR r.workflow = $1) AND ($2 = '' OR r.status = $2)
  AND ($3::uuid IS NULL OR r.id < $3::uuid)
  AND ($4::text[] IS NULL OR (r.labels <> '{}'::jsonb AND cairn_label_pairs(r.labels) @> $4::text[]))
  AND ($5::integer = 0 OR r.version = $5::integer)
  AND ($6::text IS NULL OR (r.status = 'failed' AND r.error -> 'cause' ->> 'code' = $6::text))
  AND ($7::uuid IS NULL OR r.parent_id = $7::uuid)
  AND ($8::uuid IS NULL OR r.id >= $8::uuid)
  AND ($9::uuid IS NULL OR r.id < $9::uuid)
  AND ($10::text IS NULL OR (cairn_namespace(r.workflow) = $10::text
                             AND ($10::text = 'default' OR strpos(r.workflow, '/') > 0)))`

	sqlRunCount = `SELECT count(*) FROM runs r WHERE ` + runFilter

	sqlRunCancel = `SELECT cairn_run_cancel($1, $2)`

	// sqlRunPause and sqlRunResume take the run's locks in the lock order first
	// (cairn_run_control_lock, catalog/sql/run_control.sql, in their WHERE: a
	// one-time filter, evaluated before the function), so that they never wait
	// for the run's finishers in a circle.
	sqlRunPause  = `SELECT cairn_run_pause($1, $2, $3) WHERE cairn_run_control_lock($1)`
	sqlRunResume = `SELECT cairn_run_resume($1, $2, $3) WHERE cairn_run_control_lock($1)`
)

// Run is a run of a pinned workflow version.
type Run struct {
	ID             uuid.UUID  `db:"id"`
	Workflow       string     `db:"workflow"`
	Version        int        `db:"version"`
	Status         RunStatus  `db:"status"`
	Input          JSON       `db:"input"`
	Error          JSON       `db:"error"`
	Revision       int64      `db:"revision"`
	StepsTotal     int        `db:"steps_total"`
	StepsRemaining int        `db:"steps_remaining"`
	CreatedAt      time.Time  `db:"created_at"`
	StartedAt      *time.Time `db:"started_at"`
	FinishedAt     *time.Time `db:"finished_at"`
	// RerunOf is the run this one reruns (RunRerun), RerunFromStep the step it
	// reran from; nil for other runs.
	RerunOf       *uuid.UUID `db:"rerun_of"`
	RerunFromStep *string    `db:"rerun_from_step"`
	// PauseReason says why a paused run is paused; nil unless Status is RunPaused.
	PauseReason *PauseReason `db:"pause_reason"`
	// Labels are those given at start; empty, not nil, when none were.
	Labels Labels `db:"labels"`
	// ParentID is the run that started this one, if any.
	ParentID *uuid.UUID `db:"parent_id"`
	// ParentStep is the step of ParentID that started this run (a child run of a
	// workflow step); nil for other runs, those linked to a parent at start too.
	ParentStep *string `db:"parent_step"`
	// InputOmitted is set by RunList on a run whose input it left out (Input is
	// nil): over RunListParams.MaxInput.
	InputOmitted bool `db:"input_omitted"`
}

// NewStep is a step of a version's layout (VersionRegisterParams.Steps): what each
// run of the version starts with.
type NewStep struct {
	Key         string
	Needs       []string
	MaxAttempts int
	// OnExhausted is what happens when the step would fail: OnExhaustedFail (also
	// when empty) or OnExhaustedPause.
	OnExhausted OnExhausted
	// After is the step's trigger rule; empty means TriggerAllSucceeded.
	After TriggerRule
	// When says the step has a condition: it is decided (StepDecide) before the
	// step can be claimed.
	When bool
	// CompensateAttempts is the max_attempts of the step's compensation; 0 when it
	// has none.
	CompensateAttempts int
}

// RunCreateParams describe a run to create.
type RunCreateParams struct {
	Workflow string
	// Version to run; 0 means the one Alias names.
	Version int
	// Alias, when Version is 0, is the alias whose version to run, resolved in the
	// statement that creates the run; "" means latest. The run is pinned to the
	// version it got: moving the alias later does not move the run.
	Alias string
	Input json.RawMessage
	// Labels of the run: at most MaxLabels, each as LabelProblem says; none when
	// nil.
	Labels Labels
	// Deadline, when set, is when the run fails (code deadline_exceeded) if it has
	// not ended; else its creation plus the manifest's timeout, if any.
	Deadline *time.Time
	// Priority, when set (0..9), is the priority of every step of the run, in
	// place of the steps' own (default 5).
	Priority *int
	// Parent, when not uuid.Nil, is the run that starts this one.
	Parent uuid.UUID
	// IdempotencyKey, when set, makes the create idempotent within
	// IdempotencyScope: the same key with the same RequestHash returns the first
	// run; with another hash, ErrIdempotencyMismatch.
	IdempotencyKey   string
	IdempotencyScope string
	RequestHash      string
}

// RunCreate commits a run, all its step rows, its first event and the idempotency
// record in one transaction, and wakes the dispatchers: at the commit when it is
// the only creation under way in this process, else after it (Store.wakes: the
// wake-ups of concurrent creations are folded, and their commits no longer wait
// for each other's). created is false when an earlier
// request with the same idempotency key made the run. ErrNotFound if the workflow,
// the version or the alias does not exist; ErrInvalidInput if a label breaks the
// rules.
func (s *Store) RunCreate(ctx context.Context, p *RunCreateParams) (run *Run, created bool, err error) {
	if err := p.Labels.check(); err != nil {
		return nil, false, fmt.Errorf("create run of %s: %w", p.Workflow, err)
	}
	if p.Priority != nil && (*p.Priority < 0 || *p.Priority > 9) {
		return nil, false, fmt.Errorf("create run of %s: %w: priority %d is not within 0..9", p.Workflow, ErrInvalidInput, *p.Priority)
	}
	alone := s.creating.Add(1) == 1
	defer s.creating.Add(-1)
	// A run started by an audited write (the API's) records it in the same
	// statement (audit.go); in a transaction when it cannot be one statement.
	audit := AuditOf(ctx)
	if p.IdempotencyKey == "" {
		run, err = s.runCreateFlowFree(ctx, p, alone, audit)
		if errors.Is(err, sql.ErrNoRows) && audit == nil {
			// The version has flow settings (or none was found: runCreateTx says so).
			run, _, err = runCreateTx(ctx, pooledQueryer{s.db, s}, p, s.cfg.IdempotencyTTL, alone)
		}
		if err == nil {
			created = true
		} else if !errors.Is(err, sql.ErrNoRows) || audit == nil {
			return nil, false, fmt.Errorf("create run of %s v%d: %w", p.Workflow, p.Version, translateError(err))
		}
	}
	if !created {
		err = s.inTx(ctx, func(tx *sqlx.Tx) error {
			run, created, err = runCreateTx(ctx, tx, p, s.cfg.IdempotencyTTL, alone)
			return err
		})
		if err != nil {
			return nil, false, fmt.Errorf("create run of %s v%d: %w", p.Workflow, p.Version, err)
		}
	}
	if created && !alone {
		s.wakes.wake()
	}
	return run, created, nil
}

// runCreateFlowFree creates the run p describes in one round trip when the
// version it resolves has no step with flow settings (sqlRunCreateFlowFree, or
// sqlRunCreateFlowFreeQuiet unless wake); sql.ErrNoRows when it has, or when there
// is no such version.
// With audit (not yet recorded), the same statement records it.
func (s *Store) runCreateFlowFree(ctx context.Context, p *RunCreateParams, wake bool, audit *Audit) (*Run, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return nil, fmt.Errorf("new run id: %w", err)
	}
	query, args := runCreateStatement(true, wake), runCreateArgs(id, p, p.Version, nil, nil)
	if audit != nil {
		audit.mu.Lock()
		defer audit.mu.Unlock()
		if audit.recorded {
			audit = nil
		} else {
			query = auditedRunCreate[query]
			args = append(args, audit.Actor, audit.Role, audit.Action, audit.Target, audit.RequestID)
		}
	}
	run := &Run{}
	if err := s.getPrepared(ctx, run, query, args...); err != nil {
		return nil, err
	}
	if audit != nil {
		audit.recorded = true
	}
	return run, nil
}

// auditedRunCreate is each one-statement run creation with the audit record of
// the write that asked for it ($12 to $16: actor, role, action, target, request
// ID), inserted when the run is.
var auditedRunCreate = map[string]string{
	sqlRunCreateFlowFree:      withRunCreateAudit(sqlRunCreateFlowFree),
	sqlRunCreateFlowFreeQuiet: withRunCreateAudit(sqlRunCreateFlowFreeQuiet),
}

func withRunCreateAudit(query string) string {
	const end = "\n)\nSELECT r.* -- the RETURNING list above"
	if strings.Count(query, end) != 1 {
		panic("catalog: the run creation statement has no place for its audit record")
	}
	return strings.Replace(query, end, `
), au AS (
    INSERT INTO audit_log (actor, role, namespace, action, target, request_id, outcome, code)
    SELECT $12, $13, NULL, $14, $15, $16, 'ok', '' FROM r`+end, 1)
}

// runCreateArgs are sqlRunCreate's parameters: the run p describes, with id, of
// version (0: the alias's, or the latest) and the steps' and the failure
// handlers' flow settings (flowKeys).
func runCreateArgs(id uuid.UUID, p *RunCreateParams, version int, flow, hflow json.RawMessage) []any {
	var parent any
	if p.Parent != uuid.Nil {
		parent = p.Parent
	}
	var priority any
	if p.Priority != nil {
		priority = *p.Priority
	}
	var deadline any
	if p.Deadline != nil {
		deadline = *p.Deadline
	}
	return []any{id, p.Workflow, version, nullJSON(p.Input), p.Labels, parent, p.Alias, nullJSON(flow), priority, deadline,
		nullJSON(hflow)}
}

// queryer is what runCreateTx needs of a transaction (or of the pool, for a run
// without an idempotency key: sqlRunCreate is atomic on its own).
type queryer interface {
	sqlx.ExtContext
	GetContext(ctx context.Context, dest any, query string, args ...any) error
}

// runCreateTx creates the run p describes through q: the idempotency record first
// when p has a key (an existing record returns its run, created false, or
// ErrIdempotencyMismatch), then sqlRunCreate. It is RunCreate's body, shared with the
// callers that create runs inside a transaction of their own (schedule fires). The
// labels are not checked here. wake: the statement wakes the dispatchers at the
// commit (sqlRunCreate); else it wakes no one (sqlRunCreateQuiet) and the
// caller wakes them after the commit.
func runCreateTx(ctx context.Context, q queryer, p *RunCreateParams, ttl time.Duration, wake bool) (run *Run, created bool, err error) {
	id, err := uuid.NewV7()
	if err != nil {
		return nil, false, fmt.Errorf("new run id: %w", err)
	}
	version, flow, hflow, err := flowKeys(ctx, q, id, p.Workflow, p.Version, p.Alias, p.Input, p.Labels, p.Priority)
	if err != nil {
		return nil, false, err
	}
	if version == 0 {
		version = p.Version // none found: sqlRunCreate reports it
	}
	args := runCreateArgs(id, p, version, flow, hflow)
	if p.IdempotencyKey != "" {
		res, err := q.ExecContext(ctx, sqlIdempotencyInsert, p.IdempotencyScope, p.IdempotencyKey, p.RequestHash, id.String(),
			ttl.Seconds())
		if err != nil {
			return nil, false, err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			// Another request holds the key (its transaction has committed: the
			// insert waited for it).
			var hash, resource string
			if err := q.QueryRowxContext(ctx, sqlIdempotencyGet, p.IdempotencyScope, p.IdempotencyKey).Scan(&hash, &resource); err != nil {
				return nil, false, err
			}
			if hash != p.RequestHash {
				return nil, false, ErrIdempotencyMismatch
			}
			runID, err := uuid.Parse(resource)
			if err != nil {
				return nil, false, fmt.Errorf("idempotency record: %w", err)
			}
			run = &Run{}
			err = q.GetContext(ctx, run, sqlRunGet, runID)
			if errors.Is(err, sql.ErrNoRows) {
				// The key's run was deleted by retention before the key expired:
				// the key is free again (retention.go).
				return idempotencyTakeOver(ctx, q, p, ttl, resource, id, args, wake)
			}
			return run, false, err
		}
	}
	run = &Run{}
	if err := q.GetContext(ctx, run, runCreateStatement(false, wake), args...); err != nil {
		return nil, false, err
	}
	return run, true, nil
}

// runCreateStatement is the statement that creates a run: sqlRunCreateFlowFree
// when flowFree, sqlRunCreate otherwise; their Quiet forms unless wake.
func runCreateStatement(flowFree, wake bool) string {
	switch {
	case flowFree && wake:
		return sqlRunCreateFlowFree
	case flowFree:
		return sqlRunCreateFlowFreeQuiet
	case wake:
		return sqlRunCreate
	}
	return sqlRunCreateQuiet
}

// layoutArrays are the parallel arrays of a version's layout, as the statements
// take them.
type layoutArrays struct {
	keys, needs, exhausted, afters []string
	maxes, comps                   []int64
	whens                          []bool
}

// stepArrays lays steps out as the parallel arrays the statements take.
func stepArrays(steps []NewStep) layoutArrays {
	a := layoutArrays{
		keys: make([]string, len(steps)), needs: make([]string, len(steps)), exhausted: make([]string, len(steps)),
		afters: make([]string, len(steps)), maxes: make([]int64, len(steps)), comps: make([]int64, len(steps)),
		whens: make([]bool, len(steps)),
	}
	for i, st := range steps {
		a.keys[i], a.needs[i], a.maxes[i] = st.Key, strings.Join(st.Needs, ","), int64(st.MaxAttempts)
		a.exhausted[i] = string(cmp.Or(st.OnExhausted, OnExhaustedFail))
		if st.After != TriggerAllSucceeded {
			a.afters[i] = string(st.After)
		}
		a.whens[i], a.comps[i] = st.When, int64(st.CompensateAttempts)
	}
	return a
}

// RunGet returns a run; ErrNotFound if none.
func (s *Store) RunGet(ctx context.Context, id uuid.UUID) (*Run, error) {
	var r Run
	if err := s.getPrepared(ctx, &r, sqlRunGet, id); err != nil {
		return nil, fmt.Errorf("get run %s: %w", id, translateError(err))
	}
	return &r, nil
}

// RunListParams select a page of runs, newest first.
type RunListParams struct {
	// Workflow and Status filter when not empty.
	Workflow string `json:"workflow,omitempty"`
	Status   string `json:"status,omitempty"`
	// Labels, when not empty, keeps the runs that carry every one of them.
	Labels Labels `json:"labels,omitempty"`
	// Version, when not 0, keeps the runs of this version (of Workflow: versions
	// are numbered per workflow).
	Version int `json:"version,omitempty"`
	// ErrorCode, when not empty, keeps the failed runs whose error has this code:
	// the code of the step error that failed the run (error.cause.code).
	ErrorCode string `json:"error_code,omitempty"`
	// Parent, when not uuid.Nil, keeps the runs that this run started.
	Parent uuid.UUID `json:"parent,omitzero"`
	// Namespace, when not empty, keeps the runs of this namespace's workflows
	// (package namespace). Workflow is a qualified name.
	Namespace string `json:"namespace,omitempty"`
	// CreatedAfter and CreatedBefore, when not zero, keep the runs created at or
	// after CreatedAfter and before CreatedBefore, to the millisecond: the time of
	// a run's id (UUIDv7, made by the server that created the run; created_at is
	// the database's clock, the same time within the clocks' skew).
	CreatedAfter  time.Time `json:"created_after,omitzero"`
	CreatedBefore time.Time `json:"created_before,omitzero"`
	// Before lists runs older than this id (the keyset cursor); uuid.Nil starts at
	// the newest.
	Before uuid.UUID `json:"-"`
	// Limit is the page size.
	Limit int `json:"-"`
	// MaxInput is the largest input, in bytes of JSON text (as PostgreSQL writes
	// it) and as stored, that the page carries; a larger one is left out
	// (Run.InputOmitted), so that a page's size is bounded by Limit whatever the
	// inputs. (An input near MaxInput whose binary form does not compress can be
	// over it as stored and left out while its text is not.) 0 leaves out every
	// input.
	MaxInput int `json:"-"`
}

// RunList returns a page of runs, newest first, with the inputs over p.MaxInput
// left out.
func (s *Store) RunList(ctx context.Context, p *RunListParams) ([]Run, error) {
	query, args := RunListQuery(p)
	var out []Run
	if err := s.db.SelectContext(ctx, &out, query, args...); err != nil {
		return nil, fmt.Errorf("list runs: %w", translateError(err))
	}
	return out, nil
}

// RunCount counts the runs RunList would list with p over every page: its filter
// and Before, without Limit.
func (s *Store) RunCount(ctx context.Context, p *RunListParams) (int, error) {
	var n int
	if err := s.db.GetContext(ctx, &n, sqlRunCount, runFilterArgs(p)...); err != nil {
		return 0, fmt.Errorf("count runs: %w", translateError(err))
	}
	return n, nil
}

// RunListQuery returns the statement RunList runs for p, and its arguments: what
// the benchmark explains (EXPLAIN ANALYZE) to show the plan of a list.
func RunListQuery(p *RunListParams) (query string, args []any) {
	return sqlRunList, append(runFilterArgs(p), p.Limit, p.MaxInput)
}

// runFilterArgs are the parameters of runFilter for p.
func runFilterArgs(p *RunListParams) []any {
	var before, labels, errorCode, parent, after, until, ns any
	if p.Before != uuid.Nil {
		before = p.Before
	}
	if len(p.Labels) > 0 {
		pairs := make([]string, 0, len(p.Labels))
		for _, k := range slices.Sorted(maps.Keys(p.Labels)) {
			pairs = append(pairs, k+"="+p.Labels[k]) // as cairn_label_pairs makes them
		}
		labels = pq.Array(pairs)
	}
	if p.ErrorCode != "" {
		errorCode = p.ErrorCode
	}
	if p.Parent != uuid.Nil {
		parent = p.Parent
	}
	if !p.CreatedAfter.IsZero() {
		after = FirstRunIDAt(p.CreatedAfter)
	}
	if !p.CreatedBefore.IsZero() {
		until = FirstRunIDAt(p.CreatedBefore)
	}
	if p.Namespace != "" {
		ns = p.Namespace
	}
	return []any{p.Workflow, p.Status, before, labels, p.Version, errorCode, parent, after, until, ns}
}

// FirstRunIDAt returns the smallest run id (UUIDv7) of the millisecond of t: every
// run created in that millisecond or later has an id at least this one; every run
// created earlier, a smaller one. A time before 1970 is taken as 1970, one past
// the 48 bits of a UUIDv7's milliseconds (the year 10889) as the last of them.
func FirstRunIDAt(t time.Time) uuid.UUID {
	ms := min(max(t.UnixMilli(), 0), 1<<48-1)
	var id uuid.UUID
	binary.BigEndian.PutUint64(id[:8], uint64(ms)<<16) // 48 bits of milliseconds first
	id[6] = 0x70                                       // version 7, then rand_a all zero
	id[8] = 0x80                                       // the RFC 9562 variant, then rand_b all zero
	return id
}

// RunCancel cancels a run: steps not yet finished become canceled, running attempts
// are revoked (their dispatchers are notified and kill them). ErrNotFound if no such
// run, ErrRunFinished if it already ended (cairn_run_cancel raises CA404 and CA409).
func (s *Store) RunCancel(ctx context.Context, id uuid.UUID, reason string) error {
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		_, err := tx.ExecContext(ctx, sqlRunCancel, id, reason)
		return err
	})
	if err != nil {
		return fmt.Errorf("cancel run %s: %w", id, err)
	}
	return nil
}

// RunPause pauses a run at an operator's request (actor, with an optional note):
// no new attempt of it starts, running ones finish. A pending or running run is
// paused (changed true, a run.paused event); a paused run stays so (changed false,
// nothing written), except that a run paused by its workflow is from then on
// paused by the operator (changed true): the workflow's resume does not release
// it. ErrNotFound if no such run, ErrRunState if it has ended.
func (s *Store) RunPause(ctx context.Context, id uuid.UUID, actor, note string) (changed bool, err error) {
	err = s.inTx(ctx, func(tx *sqlx.Tx) error {
		return tx.GetContext(ctx, &changed, sqlRunPause, id, actor, note)
	})
	if err != nil {
		return false, fmt.Errorf("pause run %s: %w", id, err)
	}
	return changed, nil
}

// RunResume releases a paused run, whatever paused it (an operator, its workflow,
// a step's on_exhausted: pause): it is running again (pending if no step has
// started), with a run.resumed event naming actor. ErrNotFound if no such run,
// ErrRunState if it is not paused.
func (s *Store) RunResume(ctx context.Context, id uuid.UUID, actor, note string) error {
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		_, err := tx.ExecContext(ctx, sqlRunResume, id, actor, note)
		return err
	})
	if err != nil {
		return fmt.Errorf("resume run %s: %w", id, err)
	}
	return nil
}

// nullJSON turns an empty document into SQL NULL, and passes any other as JSON
// (text: see JSON.Value).
func nullJSON(b json.RawMessage) any {
	if len(b) == 0 {
		return nil
	}
	return JSON(b)
}
