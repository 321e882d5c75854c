package catalog

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"
)

const (
	stepColumns = `run_id, key, status, needs, deps_remaining, attempts, counted_attempts,
max_attempts, ready_at, lease_owner, lease_token, lease_expires_at, last_error, output,
checkpoint, created_at, started_at, finished_at, held, on_exhausted, wait_kind, wait_until,
wait_name, waiting_since, timeout_at, on_timeout, approval_required, approvals, trigger_rule, condition, skip_reason, phase, compensates,
child_run, map_parent, map_index, map_item, priority`

	// A map's instances are not listed with the steps (MapItemList pages them).
	sqlStepList = `SELECT ` + stepColumns + ` FROM steps WHERE run_id = $1 AND map_parent IS NULL ORDER BY created_at, key`

	sqlStepGet = `SELECT ` + stepColumns + ` FROM steps WHERE run_id = $1 AND key = $2`

	attemptColumns = `run_id, step_key, number, status, dispatcher, lease_token, counted, error,
log_key, started_at, finished_at`

	sqlAttemptList = `
SELECT ` + attemptColumns + ` FROM attempts WHERE run_id = $1 AND step_key = $2 ORDER BY number`

	sqlAttemptGet = `
SELECT ` + attemptColumns + ` FROM attempts WHERE run_id = $1 AND step_key = $2 AND number = $3`
)

// Step is one step of a run: its state, lease and result.
type Step struct {
	RunID         uuid.UUID      `db:"run_id"`
	Key           string         `db:"key"`
	Status        StepStatus     `db:"status"`
	Needs         pq.StringArray `db:"needs"`
	DepsRemaining int            `db:"deps_remaining"`
	// Attempts is how many times the step was claimed: the number of its latest
	// attempt.
	Attempts int `db:"attempts"`
	// CountedAttempts is how many of them count against MaxAttempts: all but
	// those handed back at shutdown or failed by Cairn's own infrastructure
	// (OutcomeHandback, OutcomeInfraFailed). A claim counts its attempt at once (a
	// dispatcher that dies cannot report it); those two outcomes take it back.
	CountedAttempts int        `db:"counted_attempts"`
	MaxAttempts     int        `db:"max_attempts"`
	ReadyAt         *time.Time `db:"ready_at"`
	LeaseOwner      *string    `db:"lease_owner"`
	LeaseToken      *int64     `db:"lease_token"`
	LeaseExpiresAt  *time.Time `db:"lease_expires_at"`
	LastError       JSON       `db:"last_error"`
	Output          JSON       `db:"output"`
	Checkpoint      JSON       `db:"checkpoint"`
	CreatedAt       time.Time  `db:"created_at"`
	StartedAt       *time.Time `db:"started_at"`
	FinishedAt      *time.Time `db:"finished_at"`
	// Held is true while the step's run is paused: no attempt of it starts. It is
	// meaningful on an unfinished step only.
	Held bool `db:"held"`
	// OnExhausted is what happens when the step would fail.
	OnExhausted OnExhausted `db:"on_exhausted"`
	// The wait of a suspended step (kept after it resumes): its kind, a sleep's
	// end, a signal's name, since when, its timeout and what happens then.
	WaitKind     *WaitKind  `db:"wait_kind"`
	WaitUntil    *time.Time `db:"wait_until"`
	WaitName     *string    `db:"wait_name"`
	WaitingSince *time.Time `db:"waiting_since"`
	TimeoutAt    *time.Time `db:"timeout_at"`
	OnTimeout    *OnTimeout `db:"on_timeout"`
	// Priority orders the claims of ready steps: 0..9, higher first.
	Priority int `db:"priority"`
	// An approval step's rule (set when it suspends) and the approvals in so far
	// (approval.go).
	ApprovalRequired *int `db:"approval_required"`
	Approvals        int  `db:"approvals"`
	// TriggerRule is when the step runs, given how its upstream ended.
	TriggerRule TriggerRule `db:"trigger_rule"`
	// Condition is the state of the step's when: nil when it has none.
	Condition *Condition `db:"condition"`
	// SkipReason says why a skipped step was skipped.
	SkipReason *SkipReason `db:"skip_reason"`
	// Phase is PhaseMain for a step of the DAG, else the failure handler it is.
	Phase Phase `db:"phase"`
	// Compensates is the step a compensation compensates; nil for other steps.
	Compensates *string `db:"compensates"`
	// ChildRun is the run a workflow step started and waits for (WaitChildRun).
	ChildRun *uuid.UUID `db:"child_run"`
	// MapParent is the map step an instance belongs to, MapIndex its item's index
	// and MapItem the item; nil for other steps.
	MapParent *string `db:"map_parent"`
	MapIndex  *int64  `db:"map_index"`
	MapItem   JSON    `db:"map_item"`
}

// Attempt is one try of a step.
type Attempt struct {
	RunID      uuid.UUID     `db:"run_id"`
	StepKey    string        `db:"step_key"`
	Number     int           `db:"number"`
	Status     AttemptStatus `db:"status"`
	Dispatcher string        `db:"dispatcher"`
	LeaseToken int64         `db:"lease_token"`
	Counted    bool          `db:"counted"`
	Error      JSON          `db:"error"`
	LogKey     *string       `db:"log_key"`
	StartedAt  time.Time     `db:"started_at"`
	FinishedAt *time.Time    `db:"finished_at"`
}

// StepList returns every step of a run in definition order.
func (s *Store) StepList(ctx context.Context, runID uuid.UUID) ([]Step, error) {
	var out []Step
	if err := s.db.SelectContext(ctx, &out, sqlStepList, runID); err != nil {
		return nil, fmt.Errorf("list steps of run %s: %w", runID, translateError(err))
	}
	return out, nil
}

// StepGet returns one step; ErrNotFound if none.
func (s *Store) StepGet(ctx context.Context, runID uuid.UUID, key string) (*Step, error) {
	var st Step
	if err := s.db.GetContext(ctx, &st, sqlStepGet, runID, key); err != nil {
		return nil, fmt.Errorf("get step %s of run %s: %w", key, runID, translateError(err))
	}
	return &st, nil
}

// AttemptList returns a step's attempts in order.
func (s *Store) AttemptList(ctx context.Context, runID uuid.UUID, key string) ([]Attempt, error) {
	var out []Attempt
	if err := s.db.SelectContext(ctx, &out, sqlAttemptList, runID, key); err != nil {
		return nil, fmt.Errorf("list attempts of %s/%s: %w", runID, key, translateError(err))
	}
	return out, nil
}

// AttemptGet returns one attempt; ErrNotFound if none.
func (s *Store) AttemptGet(ctx context.Context, runID uuid.UUID, key string, number int) (*Attempt, error) {
	var a Attempt
	if err := s.db.GetContext(ctx, &a, sqlAttemptGet, runID, key, number); err != nil {
		return nil, fmt.Errorf("get attempt %d of %s/%s: %w", number, runID, key, translateError(err))
	}
	return &a, nil
}
