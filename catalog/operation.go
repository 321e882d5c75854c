package catalog

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
)

// OperationAction is what a bulk operation does to each run it matches.
type OperationAction string

// Bulk actions.
const (
	ActionCancel OperationAction = "cancel"
	ActionRetry  OperationAction = "retry"
	ActionPause  OperationAction = "pause"
	ActionResume OperationAction = "resume"
)

// OperationStatus is the state of a bulk operation: running → succeeded | failed |
// canceled.
type OperationStatus string

// Operation states.
const (
	OperationRunning   OperationStatus = "running"
	OperationSucceeded OperationStatus = "succeeded"
	OperationFailed    OperationStatus = "failed"
	OperationCanceled  OperationStatus = "canceled"
)

// Operation is a bulk operation: an action applied, in batches, to every run its
// filter matched when it was created.
type Operation struct {
	ID     uuid.UUID       `db:"id"`
	Action OperationAction `db:"action"`
	// Filter is the RunListParams the runs were matched with, paging fields zero.
	Filter JSON            `db:"filter"`
	Bound  uuid.UUID       `db:"bound"`
	Cursor *uuid.UUID      `db:"cursor"`
	Status OperationStatus `db:"status"`
	Actor  string          `db:"actor"`
	// Total is how many runs the filter matched at creation; Processed counts the
	// runs done so far, Applied those the action changed, Skipped those it did not
	// apply to (their state), Processed = Applied + Skipped.
	Total          int        `db:"total"`
	Processed      int        `db:"processed"`
	Applied        int        `db:"applied"`
	Skipped        int        `db:"skipped"`
	Error          JSON       `db:"error"`
	LeaseOwner     *string    `db:"lease_owner"`
	LeaseExpiresAt *time.Time `db:"lease_expires_at"`
	CreatedAt      time.Time  `db:"created_at"`
	UpdatedAt      time.Time  `db:"updated_at"`
	FinishedAt     *time.Time `db:"finished_at"`
}

// OperationRun is what an operation did to one run.
type OperationRun struct {
	RunID   uuid.UUID `db:"run_id"`
	Outcome string    `db:"outcome"` // applied or skipped
	Detail  string    `db:"detail"`  // why it was skipped
	At      time.Time `db:"at"`
}

const (
	operationColumns = `id, action, filter, bound, cursor, status, actor, total, processed, applied,
skipped, error, lease_owner, lease_expires_at, created_at, updated_at, finished_at`

	sqlOperationInsert = `
INSERT INTO operations (id, action, filter, bound, actor, total) VALUES ($1, $2, $3, $1, $4, $5)
RETURNING ` + operationColumns

	sqlOperationGet = `SELECT ` + operationColumns + ` FROM operations WHERE id = $1`

	// sqlOperationClaim leases the oldest running operation whose lease is free or
	// expired to $1 for $2 seconds.
	sqlOperationClaim = `
UPDATE operations SET lease_owner = $1, lease_expires_at = now() + make_interval(secs => $2)
WHERE id = (
    SELECT id FROM operations
    WHERE status = 'running' AND (lease_expires_at IS NULL OR lease_expires_at < now())
    ORDER BY created_at
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
RETURNING ` + operationColumns

	sqlOperationLock = `
SELECT ` + operationColumns + ` FROM operations
WHERE id = $1 AND status = 'running' AND lease_owner = $2
FOR UPDATE`

	// sqlOperationRunRecord records a run as processed by the operation; no row back
	// means it was processed before (never twice: the primary key).
	sqlOperationRunRecord = `
INSERT INTO operation_runs (operation_id, run_id, outcome, detail) VALUES ($1, $2, $3, $4)
ON CONFLICT DO NOTHING RETURNING run_id`

	sqlOperationRunSkip = `
UPDATE operation_runs SET outcome = 'skipped', detail = $3 WHERE operation_id = $1 AND run_id = $2`

	sqlOperationAdvance = `
UPDATE operations SET cursor = coalesce($3, cursor), processed = processed + $4, applied = applied + $5,
    skipped = skipped + $6, updated_at = now(), lease_expires_at = now() + make_interval(secs => $7),
    status = CASE WHEN $8 THEN 'succeeded' ELSE status END,
    finished_at = CASE WHEN $8 THEN now() ELSE finished_at END,
    lease_owner = CASE WHEN $8 THEN NULL ELSE lease_owner END
WHERE id = $1 AND lease_owner = $2
RETURNING ` + operationColumns

	sqlOperationRuns = `
SELECT run_id, outcome, detail, at FROM operation_runs
WHERE operation_id = $1 AND ($2::uuid IS NULL OR run_id < $2::uuid)
ORDER BY run_id DESC
LIMIT $3`
)

// sqlOperationLockRuns takes the exclusive advisory locks of a batch's runs
// (cairn_runs_lock), which every action takes for its run.
const sqlOperationLockRuns = `SELECT cairn_runs_lock($1::uuid[])`

// operationActions are the statements that apply each action to one run ($1), on
// behalf of an actor ($2) and an operation ($3). Each answers whether it changed
// the run, or raises one of Cairn's own SQLSTATEs when the action does not apply to
// the run's state; either way a run it did not change is skipped.
var operationActions = map[OperationAction]string{
	ActionCancel: `SELECT true FROM cairn_run_cancel($1, 'canceled by ' || $2::text || ' (operation ' || $3::text || ')')`,
	// The run.retried event names the actor; the operation's record of the run
	// names the operation.
	ActionRetry: `SELECT true FROM cairn_run_retry($1, 0, $2::text), (SELECT $3::text) op`,
	// Pause and resume take the run's locks first, as RunPause and RunResume do:
	// in the WHERE of a statement without FROM, a one-time filter evaluated
	// before the function (with a FROM, a volatile filter comes after it).
	ActionPause: `SELECT cairn_run_pause($1, $2::text, 'operation ' || $3::text) WHERE cairn_run_control_lock($1)`,
	ActionResume: `SELECT true FROM (SELECT cairn_run_resume($1, $2::text, 'operation ' || $3::text)
                                WHERE cairn_run_control_lock($1)) r`,
}

// operationUnchanged is the reason a run is skipped whose action changed nothing
// (a pause of a run that an operator paused already).
const operationUnchanged = "unchanged: the run was so already"

// OperationActionSupported reports whether this server can apply action in bulk.
func OperationActionSupported(action OperationAction) bool {
	_, ok := operationActions[action]
	return ok
}

// OperationCreateParams describe a bulk operation to create.
type OperationCreateParams struct {
	Action OperationAction
	// Filter selects the runs, as for RunList; its paging fields are ignored.
	Filter RunListParams
	Actor  string
}

// OperationCreate counts the runs the filter matches now and records the operation;
// servers then apply it in batches (OperationClaim, OperationStep). Runs created
// later are not its business.
func (s *Store) OperationCreate(ctx context.Context, p *OperationCreateParams) (*Operation, error) {
	if !OperationActionSupported(p.Action) {
		return nil, fmt.Errorf("%w: unknown bulk action %q", ErrInvalidInput, p.Action)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, fmt.Errorf("new operation id: %w", err)
	}
	filter := p.Filter
	filter.Before, filter.Limit, filter.MaxInput = id, 0, 0
	total, err := s.RunCount(ctx, &filter)
	if err != nil {
		return nil, err
	}
	filter.Before = uuid.Nil
	raw, err := json.Marshal(filter)
	if err != nil {
		return nil, fmt.Errorf("operation filter: %w", err)
	}
	var op Operation
	// In a transaction: the audit record of the bulk request commits with it
	// (audit.go).
	err = s.inTx(ctx, func(tx *sqlx.Tx) error {
		return tx.GetContext(ctx, &op, sqlOperationInsert, id, p.Action, JSON(raw), p.Actor, total)
	})
	if err != nil {
		return nil, fmt.Errorf("create operation: %w", err)
	}
	return &op, nil
}

// OperationGet returns an operation; ErrNotFound if none.
func (s *Store) OperationGet(ctx context.Context, id uuid.UUID) (*Operation, error) {
	var op Operation
	if err := s.db.GetContext(ctx, &op, sqlOperationGet, id); err != nil {
		return nil, fmt.Errorf("get operation %s: %w", id, translateError(err))
	}
	return &op, nil
}

// OperationRuns returns a page of what an operation did to each run, newest run
// first, after the run before (uuid.Nil: from the start).
func (s *Store) OperationRuns(ctx context.Context, id, before uuid.UUID, limit int) ([]OperationRun, error) {
	var b any
	if before != uuid.Nil {
		b = before
	}
	var out []OperationRun
	if err := s.db.SelectContext(ctx, &out, sqlOperationRuns, id, b, limit); err != nil {
		return nil, fmt.Errorf("list runs of operation %s: %w", id, translateError(err))
	}
	return out, nil
}

// OperationClaim leases the oldest running operation nobody holds (or whose holder's
// lease expired) to owner for ttl; nil when there is none.
func (s *Store) OperationClaim(ctx context.Context, owner string, ttl time.Duration) (*Operation, error) {
	var op Operation
	err := s.db.GetContext(ctx, &op, sqlOperationClaim, owner, ttl.Seconds())
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("claim operation: %w", translateError(err))
	}
	return &op, nil
}

// OperationStep applies the operation to its next batch of at most batch runs and
// extends owner's lease by ttl, in one transaction: each run is recorded in
// operation_runs and the cursor moves past it in the same commit as the action, so
// a run is acted on exactly once whatever crashes. A run the action does not apply
// to (its state) is skipped, with the reason. The operation succeeds with the batch
// that finds fewer than batch runs. ErrLeaseLost when owner no longer holds it.
func (s *Store) OperationStep(ctx context.Context, id uuid.UUID, owner string, batch int, ttl time.Duration) (*Operation, error) {
	var out Operation
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		var op Operation
		if err := tx.GetContext(ctx, &op, sqlOperationLock, id, owner); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return ErrLeaseLost
			}
			return err
		}
		stmt, ok := operationActions[op.Action]
		if !ok {
			return fmt.Errorf("%w: unknown bulk action %q", ErrInvalidInput, op.Action)
		}
		var filter RunListParams
		if err := json.Unmarshal(op.Filter, &filter); err != nil {
			return fmt.Errorf("operation filter: %w", err)
		}
		filter.Before, filter.Limit, filter.MaxInput = op.Bound, batch, 0
		if op.Cursor != nil {
			filter.Before = *op.Cursor
		}
		// The page is read outside the transaction: the operation's row lock keeps
		// any other holder out meanwhile, and the cursor only moves in this commit.
		runs, err := s.RunList(ctx, &filter)
		if err != nil {
			return err
		}
		// The runs' locks first, all together, in the order of catalog/sql/run_control.sql
		// (each action takes its run's again, held already): one run after the
		// other, a parent's could come after its child's.
		ids := make([]uuid.UUID, len(runs))
		for i, r := range runs {
			ids[i] = r.ID
		}
		if _, err := tx.ExecContext(ctx, sqlOperationLockRuns, pq.Array(ids)); err != nil {
			return err
		}
		var applied, skipped int
		for _, r := range runs {
			var recorded uuid.UUID
			if err := tx.GetContext(ctx, &recorded, sqlOperationRunRecord, op.ID, r.ID, "applied", ""); err != nil {
				if errors.Is(err, sql.ErrNoRows) {
					continue // processed before: never twice
				}
				return err
			}
			if _, err := tx.ExecContext(ctx, "SAVEPOINT operation_run"); err != nil {
				return err
			}
			var changed bool
			aerr := tx.GetContext(ctx, &changed, stmt, r.ID, op.Actor, op.ID.String())
			if aerr == nil && changed {
				applied++
				if _, err := tx.ExecContext(ctx, "RELEASE SAVEPOINT operation_run"); err != nil {
					return err
				}
				continue
			}
			reason := operationUnchanged
			if aerr != nil {
				reason = Reason(aerr)
				if terr := translateError(aerr); reason == "" || !(errors.Is(terr, ErrConflict) || errors.Is(terr, ErrNotFound)) {
					return aerr // not the run's state: the whole batch is tried again
				}
			}
			if _, err := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT operation_run"); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, sqlOperationRunSkip, op.ID, r.ID, reason); err != nil {
				return err
			}
			skipped++
		}
		var cursor any
		if len(runs) > 0 {
			cursor = runs[len(runs)-1].ID
		}
		done := len(runs) < batch
		return tx.GetContext(ctx, &out, sqlOperationAdvance, op.ID, owner, cursor, applied+skipped, applied, skipped, ttl.Seconds(), done)
	})
	if err != nil {
		return nil, fmt.Errorf("operation %s: %w", id, err)
	}
	return &out, nil
}
