package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
)

// Approvals and callbacks, on the waits of wait.go (catalog/sql/waits.sql).
// An approval step suspends (ApprovalSuspend) until its required approvals are in
// (StepDecide), one approver rejects it, or its timeout passes. A step whose
// function answered that it completes later suspends for a callback
// (StepSuspend with WaitCallback) until CallbackComplete or its timeout.

const (
	sqlApprovalSuspend = `SELECT cairn_approval_suspend($1, $2, $3, $4, $5, $6, $7)
WHERE cairn_runs_share(ARRAY[$1::uuid])`
	sqlStepDecide       = `SELECT decision, counted FROM cairn_step_decide($1, $2, $3, $4, $5, $6, $7)`
	sqlCallbackComplete = `SELECT cairn_callback_complete($1, $2, $3, $4, $5, $6)
WHERE cairn_runs_share(ARRAY[$1::uuid])`
	sqlApprovalList = `
SELECT a.attempt, a.approver, a.decision, a.comment, a.input, a.created_at
FROM approvals a JOIN steps s ON s.run_id = a.run_id AND s.key = a.step_key AND s.attempts = a.attempt
WHERE a.run_id = $1 AND a.step_key = $2
ORDER BY a.created_at, a.approver`
)

// Decision is an approver's answer to an approval step.
type Decision string

// Decisions.
const (
	DecisionApproved Decision = "approved"
	DecisionRejected Decision = "rejected"
)

// ErrorCodeRejected is the error code of an approval step an approver rejected.
const ErrorCodeRejected = "rejected"

// Approval is the rule of an approval step (ApprovalSuspend).
type Approval struct {
	// Required distinct approvals end the step succeeded (>= 1).
	Required int
	// Roles may decide: operator, admin (admin always may).
	Roles []string
	// TimeoutAt is when the wait gives up; zero: never.
	TimeoutAt time.Time
	// OnTimeout is fail (the default) or continue.
	OnTimeout OnTimeout
}

// ApprovalSuspend suspends a claimed approval step, fenced by the lease token, with
// its rule (cairn_approval_suspend). ErrLeaseLost when the token is not the step's
// lease; ErrInvalidInput for a bad rule.
func (s *Store) ApprovalSuspend(ctx context.Context, l Lease, a Approval) error {
	var ok bool
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		return tx.GetContext(ctx, &ok, sqlApprovalSuspend, l.RunID, l.Key, l.Token, a.Required,
			pq.StringArray(a.Roles), nullTime(a.TimeoutAt), nullString(string(a.OnTimeout)))
	})
	if err != nil {
		return fmt.Errorf("suspend approval step %s/%s: %w", l.RunID, l.Key, err)
	}
	if !ok {
		return fmt.Errorf("suspend approval step %s/%s: %w", l.RunID, l.Key, ErrLeaseLost)
	}
	return nil
}

// StepDecision is one approver's decision on an approval step (StepDecide).
type StepDecision struct {
	RunID uuid.UUID
	Key   string
	// Approver is the token's name; Role its role (viewer, operator, admin).
	Approver string
	Role     string
	Decision Decision
	Comment  string
	// Input is any JSON value the approver adds; nil for none.
	Input json.RawMessage
}

// DecisionResult is what became of a decision.
type DecisionResult struct {
	// Decision is the approver's decision on the step's current attempt: this
	// one, or the first one when Counted is false.
	Decision Decision `db:"decision"`
	// Counted is false when the approver had decided before: nothing was written.
	Counted bool `db:"counted"`
}

// StepDecide records an approver's decision (cairn_step_decide): the required-th
// distinct approval ends the step succeeded with {"approved_by": [...]}, a
// rejection ends it failed (terminal, code rejected). An approver who decided
// before is answered with that decision, not counted again. ErrNotFound for no such
// step; ErrRunState when the step is not waiting for approval; ErrForbidden when
// the role may not decide it (Reason names the roles that may).
func (s *Store) StepDecide(ctx context.Context, d *StepDecision) (*DecisionResult, error) {
	var out DecisionResult
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, sqlRunShare, d.RunID); err != nil {
			return err
		}
		return tx.GetContext(ctx, &out, sqlStepDecide, d.RunID, d.Key, d.Approver, d.Role, string(d.Decision),
			d.Comment, nullJSON(d.Input))
	})
	if err != nil {
		return nil, fmt.Errorf("%s step %s/%s: %w", d.Decision, d.RunID, d.Key, err)
	}
	return &out, nil
}

// ApprovalRecord is a decision recorded on an approval step.
type ApprovalRecord struct {
	Attempt   int       `db:"attempt"`
	Approver  string    `db:"approver"`
	Decision  Decision  `db:"decision"`
	Comment   string    `db:"comment"`
	Input     JSON      `db:"input"`
	CreatedAt time.Time `db:"created_at"`
}

// ApprovalList returns the decisions on the current attempt of a step, in order.
func (s *Store) ApprovalList(ctx context.Context, runID uuid.UUID, key string) ([]ApprovalRecord, error) {
	var out []ApprovalRecord
	if err := s.db.SelectContext(ctx, &out, sqlApprovalList, runID, key); err != nil {
		return nil, fmt.Errorf("list approvals of %s/%s: %w", runID, key, translateError(err))
	}
	return out, nil
}

// CallbackComplete ends a step suspended for the callback of its attempt
// (cairn_callback_complete): succeeded with r.Output or failed (terminal) with
// r.Error. A callback that comes while that attempt still runs (before its
// function answered {"$suspend": …}) is kept and applied when the step suspends
// (StepSuspend): buffered is then true. ErrCallbackNotWaiting (an ErrRunState)
// when the step does not wait for that attempt's callback (nothing is written);
// ErrNotFound for no such step.
func (s *Store) CallbackComplete(ctx context.Context, runID uuid.UUID, key string, attempt int, r Resolution) (buffered bool, err error) {
	err = s.inTx(ctx, func(tx *sqlx.Tx) error {
		return tx.GetContext(ctx, &buffered, sqlCallbackComplete, runID, key, attempt, string(r.Outcome),
			nullJSON(r.Output), nullJSON(r.Error))
	})
	if errors.Is(err, ErrRunState) {
		return false, fmt.Errorf("callback of step %s/%s attempt %d: %w: %w", runID, key, attempt, ErrCallbackNotWaiting, err)
	}
	if err != nil {
		return false, fmt.Errorf("callback of step %s/%s attempt %d: %w", runID, key, attempt, err)
	}
	return buffered, nil
}
