package catalog

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
)

// ErrIdempotencyMismatch means an idempotency key was used before with a different
// request. It wraps ErrConflict.
var ErrIdempotencyMismatch = fmt.Errorf("%w: idempotency key was used with a different request", ErrConflict)

// ErrRunFinished means the run is already terminal (cancel of a finished run). It
// wraps ErrConflict.
var ErrRunFinished = fmt.Errorf("%w: run already finished", ErrConflict)

const (
	runColumns = `id, workflow, version, status, input, error, revision, steps_total,
steps_remaining, created_at, started_at, finished_at`

	sqlIdempotencyInsert = `
INSERT INTO idempotency_keys (scope, key, request_hash, resource_id) VALUES ($1, $2, $3, $4)
ON CONFLICT (scope, key) DO NOTHING`

	sqlIdempotencyGet = `
SELECT request_hash, resource_id FROM idempotency_keys WHERE scope = $1 AND key = $2`

	// sqlRunCreate makes a run in one statement (atomic on its own): it resolves the
	// version ($3; when 0, the one alias $5 names, latest when $5 is ''), then
	// inserts the run, its steps (the version's layout: parallel arrays, needs
	// comma-joined, keys cannot hold commas), the DAG's edges, the run.created event (seq 1), and wakes the
	// dispatchers. Foreign keys are checked at the end of the statement,
	// when all rows exist. No row back means no such version.
	sqlRunCreate = `
WITH v AS (
    SELECT v.workflow, v.version,
           v.step_keys AS keys, v.step_needs AS needs, v.step_max_attempts AS maxes
    FROM workflow_versions v
    WHERE v.workflow = $2
      AND v.version = CASE WHEN $3::integer = 0
                           THEN cairn_alias_version($2, coalesce(nullif($5::text, ''), 'latest'))
                           ELSE $3::integer END
), r AS (
    INSERT INTO runs (id, workflow, version, input, steps_total, steps_remaining, revision)
    SELECT $1, v.workflow, v.version, $4, cardinality(v.keys), cardinality(v.keys), 1 FROM v
    RETURNING ` + runColumns + `
), st AS (
    INSERT INTO steps (run_id, key, status, needs, deps_remaining, max_attempts, ready_at)
    SELECT $1, k, CASE WHEN n = '' THEN 'ready' ELSE 'waiting' END,
           coalesce(string_to_array(nullif(n, ''), ','), '{}'),
           coalesce(cardinality(string_to_array(nullif(n, ''), ',')), 0),
           m, CASE WHEN n = '' THEN now() END
    FROM v, unnest(v.keys, v.needs, v.maxes) AS s(k, n, m)
), ed AS (
    INSERT INTO step_edges (run_id, from_key, to_key)
    SELECT $1, n, s.k
    FROM v, unnest(v.keys, v.needs) AS s(k, ns), unnest(string_to_array(nullif(s.ns, ''), ',')) AS n
), ev AS (
    INSERT INTO events (run_id, seq, type, data)
    SELECT $1, 1, 'run.created', jsonb_build_object('workflow', v.workflow, 'version', v.version) FROM v
)
SELECT r.* -- the RETURNING list above
FROM r CROSS JOIN LATERAL (SELECT cairn_wake()) AS wake`

	sqlRunGet = `SELECT ` + runColumns + ` FROM runs WHERE id = $1`

	// sqlRunList reads a page of runs with the inputs over $5 bytes left out, as
	// stored or as JSON text, so that a large input is never read whole:
	// pg_column_size, the stored (possibly compressed) size, is known without
	// reading the value; only an input stored in at most $5 bytes is turned into
	// text to be measured.
	sqlRunList = `
SELECT r.id, r.workflow, r.version, r.status,
       CASE WHEN o.omitted THEN NULL ELSE r.input END AS input, o.omitted AS input_omitted,
       r.error, r.revision, r.steps_total, r.steps_remaining, r.created_at, r.started_at, r.finished_at
FROM runs r CROSS JOIN LATERAL (
    SELECT CASE WHEN r.input IS NULL THEN false
                WHEN pg_column_size(r.input) > $5 THEN true
                ELSE octet_length(r.input::text) > $5 END AS omitted
) o
WHERE ($1 = '' OR r.workflow = $1) AND ($2 = '' OR r.status = $2)
  AND ($3::uuid IS NULL OR r.id < $3::uuid)
ORDER BY r.id DESC
LIMIT $4`

	sqlRunCancel = `SELECT cairn_run_cancel($1, $2)`
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
	// IdempotencyKey, when set, makes the create idempotent within
	// IdempotencyScope: the same key with the same RequestHash returns the first
	// run; with another hash, ErrIdempotencyMismatch.
	IdempotencyKey   string
	IdempotencyScope string
	RequestHash      string
}

// RunCreate commits a run, all its step rows, its first event and the idempotency
// record in one transaction, then wakes dispatchers. created is false when an earlier
// request with the same idempotency key made the run. ErrNotFound if the workflow,
// the version or the alias does not exist.
func (s *Store) RunCreate(ctx context.Context, p *RunCreateParams) (run *Run, created bool, err error) {
	id, err := uuid.NewV7()
	if err != nil {
		return nil, false, fmt.Errorf("new run id: %w", err)
	}
	args := []any{id, p.Workflow, p.Version, nullJSON(p.Input), p.Alias}
	if p.IdempotencyKey == "" {
		run = &Run{}
		if err := s.db.GetContext(ctx, run, sqlRunCreate, args...); err != nil {
			return nil, false, fmt.Errorf("create run of %s v%d: %w", p.Workflow, p.Version, translateError(err))
		}
		return run, true, nil
	}
	err = s.inTx(ctx, func(tx *sqlx.Tx) error {
		res, err := tx.ExecContext(ctx, sqlIdempotencyInsert, p.IdempotencyScope, p.IdempotencyKey, p.RequestHash, id.String())
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			// Another request holds the key (its transaction has committed: the
			// insert waited for it).
			var hash, resource string
			if err := tx.QueryRowxContext(ctx, sqlIdempotencyGet, p.IdempotencyScope, p.IdempotencyKey).Scan(&hash, &resource); err != nil {
				return err
			}
			if hash != p.RequestHash {
				return ErrIdempotencyMismatch
			}
			runID, err := uuid.Parse(resource)
			if err != nil {
				return fmt.Errorf("idempotency record: %w", err)
			}
			run = &Run{}
			return tx.GetContext(ctx, run, sqlRunGet, runID)
		}
		created = true
		run = &Run{}
		return tx.GetContext(ctx, run, sqlRunCreate, args...)
	})
	if err != nil {
		return nil, false, fmt.Errorf("create run of %s v%d: %w", p.Workflow, p.Version, err)
	}
	return run, created, nil
}

// stepArrays lays steps out as the parallel arrays the statements take.
func stepArrays(steps []NewStep) (keys, needs []string, maxes []int64) {
	keys = make([]string, len(steps))
	needs = make([]string, len(steps))
	maxes = make([]int64, len(steps))
	for i, st := range steps {
		keys[i], needs[i], maxes[i] = st.Key, strings.Join(st.Needs, ","), int64(st.MaxAttempts)
	}
	return keys, needs, maxes
}

// RunGet returns a run; ErrNotFound if none.
func (s *Store) RunGet(ctx context.Context, id uuid.UUID) (*Run, error) {
	var r Run
	if err := s.db.GetContext(ctx, &r, sqlRunGet, id); err != nil {
		return nil, fmt.Errorf("get run %s: %w", id, translateError(err))
	}
	return &r, nil
}

// RunListParams select a page of runs, newest first.
type RunListParams struct {
	// Workflow and Status filter when not empty.
	Workflow string
	Status   string
	// Before lists runs older than this id (the keyset cursor); uuid.Nil starts at
	// the newest.
	Before uuid.UUID
	// Limit is the page size.
	Limit int
	// MaxInput is the largest input, in bytes of JSON text (as PostgreSQL writes
	// it) and as stored, that the page carries; a larger one is left out
	// (Run.InputOmitted), so that a page's size is bounded by Limit whatever the
	// inputs. (An input near MaxInput whose binary form does not compress can be
	// over it as stored and left out while its text is not.) 0 leaves out every
	// input.
	MaxInput int
}

// RunList returns a page of runs, newest first, with the inputs over p.MaxInput
// left out.
func (s *Store) RunList(ctx context.Context, p *RunListParams) ([]Run, error) {
	var before any
	if p.Before != uuid.Nil {
		before = p.Before
	}
	var out []Run
	if err := s.db.SelectContext(ctx, &out, sqlRunList, p.Workflow, p.Status, before, p.Limit, p.MaxInput); err != nil {
		return nil, fmt.Errorf("list runs: %w", translateError(err))
	}
	return out, nil
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

// nullJSON turns an empty document into SQL NULL.
func nullJSON(b json.RawMessage) any {
	if len(b) == 0 {
		return nil
	}
	return []byte(b)
}
