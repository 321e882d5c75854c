package catalog

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
)

// Conditions and failure handling (catalog/sql/steps.sql). Trigger rules and
// compensation are decided in SQL (cairn_skip_dependents, cairn_steps_succeed,
// cairn_run_settle); a step's when is a CEL expression, evaluated in Go: the
// steps waiting for that decision are read and decided here, under their row
// locks, one transaction per batch.

const (
	// sqlConditionsPending locks up to $1 ready steps whose condition is not
	// decided (steps_condition_idx), skipping those another decider holds, with
	// what their expression sees.
	sqlConditionsPending = `
SELECT s.run_id, s.key, r.workflow, r.version, r.input, r.labels,
       (SELECT coalesce(jsonb_object_agg(d.key, coalesce(d.output, 'null'::jsonb)), '{}')
        FROM steps d WHERE d.run_id = s.run_id AND d.key = ANY (s.needs)) AS deps
FROM steps s JOIN runs r ON r.id = s.run_id
WHERE s.status = 'ready' AND s.condition = 'pending' AND NOT s.held AND s.ready_at <= now()
ORDER BY s.ready_at
LIMIT $1
FOR UPDATE OF s SKIP LOCKED`

	// sqlConditionsAny says whether sqlConditionsPending may find a step, without
	// a transaction or locks (steps_condition_idx): most claims have none to decide.
	sqlConditionsAny = `
SELECT EXISTS (SELECT 1 FROM steps s
               WHERE s.status = 'ready' AND s.condition = 'pending' AND NOT s.held AND s.ready_at <= now())`

	sqlConditionDecide = `SELECT cairn_condition_decide($1, $2, $3, $4)
WHERE cairn_runs_share(ARRAY[$1::uuid])`

	// sqlRunFailure is what a failure handler's envelope says of the failure:
	// the steps of the DAG that failed, with their errors, and the compensations
	// so far.
	sqlRunFailure = `
SELECT jsonb_build_object(
    'error', r.error,
    'steps', (SELECT coalesce(jsonb_agg(jsonb_build_object('key', s.key, 'error', s.last_error)
                                        ORDER BY s.finished_at, s.key), '[]')
              FROM steps s WHERE s.run_id = r.id AND s.phase = 'main' AND s.status = 'failed'),
    'compensations', (SELECT coalesce(jsonb_agg(jsonb_strip_nulls(jsonb_build_object(
                                 'key', s.key, 'compensates', s.compensates, 'status', s.status,
                                 'error', CASE WHEN s.status = 'failed' THEN s.last_error END))
                             ORDER BY s.finished_at NULLS LAST, s.key), '[]')
                      FROM steps s WHERE s.run_id = r.id AND s.phase = 'compensate'))
FROM runs r WHERE r.id = $1`
)

// PendingCondition is a ready step whose when is to be decided, with what its
// expression sees.
type PendingCondition struct {
	RunID    uuid.UUID `db:"run_id"`
	Key      string    `db:"key"`
	Workflow string    `db:"workflow"`
	Version  int       `db:"version"`
	Input    JSON      `db:"input"`
	Labels   Labels    `db:"labels"`
	// Deps maps each upstream key to its stored output (null for a step that did
	// not succeed).
	Deps JSON `db:"deps"`
}

// ConditionDecision is the outcome of a step's condition: Pass, or Error (the expression
// failed: the step fails with it, {"message", "code": "expression"}), or Later
// (the decider cannot decide now, its own infrastructure failing: the step stays
// pending, for the next round).
type ConditionDecision struct {
	Pass  bool
	Error json.RawMessage
	Later bool
}

// ConditionsDecide decides the conditions of up to limit ready steps, in one
// transaction: each is locked (steps another decider holds are skipped), decide
// says its outcome, and the catalog writes it (cairn_condition_decide): a step that
// passes becomes claimable; one that does not is skipped (reason condition_false,
// no attempt) and its dependents follow their trigger rules; one whose expression
// failed fails. decide runs under the row locks: it must be quick and must not
// touch the catalog. Returns how many steps were decided.
func (s *Store) ConditionsDecide(ctx context.Context, limit int, decide func(*PendingCondition) ConditionDecision) (int, error) {
	var found bool
	if err := s.getPrepared(ctx, &found, sqlConditionsAny); err != nil {
		return 0, fmt.Errorf("decide conditions: %w", translateError(err))
	}
	if !found {
		return 0, nil
	}
	n := 0
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		n = 0
		var pending []PendingCondition
		if err := tx.SelectContext(ctx, &pending, sqlConditionsPending, limit); err != nil {
			return err
		}
		for i := range pending {
			p := &pending[i]
			d := decide(p)
			if d.Later {
				continue
			}
			var errJSON any
			if d.Error != nil {
				errJSON = JSON(d.Error)
			}
			var ok bool
			if err := tx.GetContext(ctx, &ok, sqlConditionDecide, p.RunID, p.Key, d.Pass, errJSON); err != nil {
				return err
			}
			if ok {
				n++
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("decide conditions: %w", err)
	}
	return n, nil
}

// RunFailure returns what a failure handler's envelope carries as "failure": the
// run's error, the steps of its DAG that failed ({key, error}, in the order they
// failed) and its compensations so far ({key, compensates, status, error}).
// ErrNotFound if there is no such run.
func (s *Store) RunFailure(ctx context.Context, runID uuid.UUID) (json.RawMessage, error) {
	var out JSON
	if err := s.db.GetContext(ctx, &out, sqlRunFailure, runID); err != nil {
		return nil, fmt.Errorf("read the failure of run %s: %w", runID, translateError(err))
	}
	return json.RawMessage(out), nil
}
