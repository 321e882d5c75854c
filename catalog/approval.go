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
	sqlStepDecide       = `SELECT decision, counted FROM cairn_step_decide($1, $2, $3, $4, $5, $6, $7, $8)`
	sqlCallbackComplete = `SELECT cairn_callback_complete($1, $2, $3, $4, $5, $6)
WHERE cairn_runs_share(ARRAY[$1::uuid])`
	sqlCallbackClaim = `SELECT cairn_callback_claim($1, $2, $3, $4, make_interval(secs => $5))`
	// The holder of a claim renews it, and gives it up when its request ends.
	sqlCallbackClaimRenew = `
UPDATE callback_claims SET until = clock_timestamp() + make_interval(secs => $4)
 WHERE run_id = $1 AND step_key = $2 AND holder = $3`
	sqlCallbackClaimRelease = `DELETE FROM callback_claims WHERE run_id = $1 AND step_key = $2 AND holder = $3`
	sqlApprovalList         = `
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
	// Unnamed is true when the token has no name of its own (Approver is then its
	// role's, shared by every unnamed token of that role): it may not approve a
	// step that needs more than one approver, since it tells no person apart.
	Unnamed  bool
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
// before, while the step still waits, is answered with that decision, not counted
// again. ErrNotFound for no such step; ErrRunState when the step is not waiting
// for approval, whoever asks (Reason names its state: it was approved, rejected,
// failed, or its run ended); ErrForbidden when the role may not decide it (Reason
// names the roles that may), or when an Unnamed token approves a step that needs
// more than one approver.
func (s *Store) StepDecide(ctx context.Context, d *StepDecision) (*DecisionResult, error) {
	var out DecisionResult
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, sqlRunShare, d.RunID); err != nil {
			return err
		}
		return tx.GetContext(ctx, &out, sqlStepDecide, d.RunID, d.Key, d.Approver, d.Role, string(d.Decision),
			d.Comment, nullJSON(d.Input), !d.Unnamed)
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

// CallbackClaim takes the callback of attempt attempt of step key for the request
// holder, for ttl, before that request reads its body (cairn_callback_claim): a
// concurrent request for the same step is refused until the holder releases the
// claim (CallbackRelease) or it lapses (renewed by CallbackRenew). The step must
// wait for that attempt's callback as CallbackComplete takes it.
// ErrCallbackNotWaiting (Reason says why: the step's state, or another request
// holds the claim) when it does not, or another request has it; ErrNotFound for no
// such step. Nothing is written then.
func (s *Store) CallbackClaim(ctx context.Context, runID uuid.UUID, key string, attempt int, holder uuid.UUID, ttl time.Duration) error {
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		_, err := tx.ExecContext(ctx, sqlCallbackClaim, runID, key, attempt, holder, ttl.Seconds())
		return err
	})
	if errors.Is(err, ErrRunState) {
		return fmt.Errorf("claim the callback of step %s/%s attempt %d: %w: %w", runID, key, attempt, ErrCallbackNotWaiting, err)
	}
	if err != nil {
		return fmt.Errorf("claim the callback of step %s/%s attempt %d: %w", runID, key, attempt, err)
	}
	return nil
}

// CallbackRenew extends the claim of holder on step key's callback to ttl from
// now. It reports false when holder no longer has the claim (released, or lapsed
// and taken by another request).
func (s *Store) CallbackRenew(ctx context.Context, runID uuid.UUID, key string, holder uuid.UUID, ttl time.Duration) (bool, error) {
	res, err := s.db.ExecContext(ctx, sqlCallbackClaimRenew, runID, key, holder, ttl.Seconds())
	if err != nil {
		return false, fmt.Errorf("renew the callback claim of step %s/%s: %w", runID, key, translateError(err))
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// CallbackRelease gives up holder's claim on step key's callback (CallbackClaim);
// a claim holder no longer has is left alone.
func (s *Store) CallbackRelease(ctx context.Context, runID uuid.UUID, key string, holder uuid.UUID) error {
	if _, err := s.db.ExecContext(ctx, sqlCallbackClaimRelease, runID, key, holder); err != nil {
		return fmt.Errorf("release the callback claim of step %s/%s: %w", runID, key, translateError(err))
	}
	return nil
}
