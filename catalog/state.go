package catalog

// The state machine (docs/architecture.md): its states and outcomes as types. The
// rules that move between them are stated once, in the catalog's SQL functions
// (catalog/sql, steps.sql first), and pinned by TestStepFinishTransitions; this file
// names what those functions write.
//
// What follows the end of an attempt (cairn_steps_succeed writes successes,
// cairn_step_finish the rest; the sweeper reports an expired lease as a retryable
// interrupted):
//
//   - succeeded: the attempt succeeded, the step succeeded, and its dependents whose
//     needs are all met become ready (step.succeeded).
//   - failed, timed_out: the attempt is recorded so and counts against
//     max_attempts. The step is ready again at RetryIn when the outcome is retryable
//     and counted attempts remain (step.retrying); otherwise it failed and its
//     dependents, transitively, are skipped (step.failed, step.skipped).
//   - interrupted (the sweeper took back the lease of a dispatcher that died): the
//     attempt is recorded so and does not count against max_attempts; the step is
//     ready again (step.retrying) unless it was interrupted max_interruptions times
//     in a row, which fails it with code interrupted_too_often.
//   - handback: the attempt is interrupted and does not count; the step is ready at
//     once (step.handed_back).
//   - infra_failed: the attempt failed and does not count; the step is ready at
//     RetryIn whatever Retryable says (step.retrying).
//
// When no step of a run is left unfinished, the run ends: failed if a step failed,
// else succeeded (run.failed, run.succeeded). A run that would fail and has
// failure handlers (compensations of its succeeded steps, in reverse completion
// order, then on_failure steps) is compensating first (run.compensating) and fails
// when they end, a handler that failed named in its error.
//
// Conditions and trigger rules (condition.go): a ready step with a when waits for
// StepDecide (skipped, reason condition_false, when false); a step's trigger rule
// decides, when its upstream settles, whether it becomes ready or is skipped.
// RunCancel cancels a run that has not ended, its unfinished steps and their
// running attempts (run.canceled).
//
// Pause (RunPause, WorkflowPause, or a step with on_exhausted: pause that would
// fail) holds a run's unfinished steps: the claim skips them, running attempts
// finish and are recorded as above, and a paused run still ends or is canceled so.
// Resume (RunResume, WorkflowResume) releases them (run.paused, run.resumed).
//
// Waits (wait.go): a running step may suspend (StepSuspend: its attempt ends
// succeeded, the lease is given up; step.suspended). A suspended step ends through
// StepResolve, SignalSend or the wake sweeper (WakeDue): succeeded, its dependents
// readied as above, or failed, terminal (step.resumed, then step.succeeded or
// step.failed). Pause holds suspended steps too (the sweeper skips them); cancel
// cancels them.
//
// Flow control (flow.go): a ready step waiting for a concurrency slot, a rate
// token or a dispatcher with its tags stays ready (no attempt is used). Past its
// queue_timeout the queue sweeper (QueueTimeouts) fails it, terminal, code
// queue_timeout (step.failed), its dependents skipped as for any failure.
//
// Triggers: writes that no Go function names do work of their own. Each is in
// catalog/sql/triggers.sql, with why it stays in SQL or should move into the
// function that causes it.
//
//   - events_run_relayout (an insert into events of run.retried, or of run.created
//     with rerun_of; so RunRetry and RunRerun): the run's steps get the trigger
//     rules, conditions and compensations of its version, counters cleared; a
//     retried run's failure handlers are deleted. Should move into cairn_run_retry
//     and cairn_run_rerun.
//   - runs_child_ended (a child run's status becoming succeeded, failed or
//     canceled, whoever ends it): its parent's waiting step is resolved, succeeded
//     with the child's output or failed (child_failed, child_canceled), in the
//     same transaction when the parent's step and row can be had at once, else by
//     the wake sweeper (child_run_ends). Stays.
//   - runs_children_follow (a run's status or pause_reason changing; so RunCancel,
//     RunPause, RunResume and bulk operations): its child runs are canceled, paused
//     or resumed with it, and theirs in turn. Should move into cairn_run_cancel,
//     cairn_run_hold and cairn_run_release.
//   - runs_span_outbox, steps_span_outbox (a run canceled; a suspended step ended
//     by a wake, the API or a child run): a row in span_outbox, from which the
//     dispatchers record the span no attempt recorded. Stay.
//   - steps_flow_inherit (an insert of a map instance or a failure handler): its
//     flow settings (limits, priority, runs_on, queue_timeout) from its map step or
//     from runs.handler_flow. Stays.
//   - steps_checks, steps_checks_inserted (an update of a checked column, an
//     insert): steps' CHECK rules, raising check_violation. Stay.
//   - steps_deleted (a delete from steps: the reaper, a retry's or rerun's
//     layout): the deleted steps' attempts are deleted. Stays.
//   - workflow_aliases_schedules (the alias latest created or moved: deploy,
//     promote, rollback): the workflow's schedules follow its version. Stays.
//   - workflow_versions_kept, workflow_versions_kept_truncate (a delete, renumber or
//     truncate of workflow_versions): refused, restrict_violation. Stay.

import "strings"

// RunStatus is the state of a run: pending → running → succeeded | failed |
// canceled; pending and running runs may be paused and resumed (paused → running,
// or pending when no step has started), and a paused run still ends when its last
// steps finish or it is canceled.
type RunStatus string

// Run states.
const (
	// RunPending: created, no step claimed yet.
	RunPending RunStatus = "pending"
	// RunRunning: a step was claimed.
	RunRunning RunStatus = "running"
	// RunSucceeded: every step succeeded.
	RunSucceeded RunStatus = "succeeded"
	// RunFailed: every step is terminal and one failed.
	RunFailed RunStatus = "failed"
	// RunCanceled: canceled by RunCancel.
	RunCanceled RunStatus = "canceled"
	// RunPaused: held by an operator (or by a step's on_exhausted: pause): no new
	// attempt starts; running ones finish. Resume returns it to running (or pending
	// when no step has started).
	RunPaused RunStatus = "paused"
	// RunCompensating: the run would have failed; its failure handlers
	// (compensations, then on_failure steps) run, then it fails.
	RunCompensating RunStatus = "compensating"
)

// Terminal reports whether a run in state s has ended: it changes no more.
func (s RunStatus) Terminal() bool {
	return s == RunSucceeded || s == RunFailed || s == RunCanceled
}

// PauseReason says why a paused run is paused (Run.PauseReason).
type PauseReason string

// Pause reasons.
const (
	// PauseRun: an operator paused the run (RunPause).
	PauseRun PauseReason = "run"
	// PauseWorkflow: its workflow was paused (WorkflowPause), before or after the
	// run was created; WorkflowResume releases it.
	PauseWorkflow PauseReason = "workflow"
	// PauseExhausted: a step whose retry policy says on_exhausted: pause would have
	// failed; it is parked (ready, held, with a fresh attempt budget) until an
	// operator resumes or cancels the run.
	PauseExhausted PauseReason = "exhausted"
)

// OnExhausted is what a step does when it would fail (its attempts used up, or a
// failure not retryable): the retry policy's on_exhausted.
type OnExhausted string

// What a step does when it would fail.
const (
	// OnExhaustedFail: the step fails, its dependents are skipped, the run fails.
	OnExhaustedFail OnExhausted = "fail"
	// OnExhaustedPause: the step is parked and its run paused (PauseExhausted).
	OnExhaustedPause OnExhausted = "pause"
)

// StepStatus is the state of a step of a run: waiting (upstream not done) → ready
// (claimable at ready_at) → running (leased) → succeeded | failed | canceled |
// skipped (an upstream step did not succeed). A retried step goes from running back
// to ready. A running step may be suspended (a durable wait) and then ends
// succeeded or failed.
type StepStatus string

// Step states.
const (
	StepWaiting StepStatus = "waiting"
	StepReady   StepStatus = "ready"
	StepRunning StepStatus = "running"
	// StepSuspended: a durable wait (sleep, signal, approval, callback): no lease,
	// no slot; Step.WaitKind and the other wait fields say what for.
	StepSuspended StepStatus = "suspended"
	StepSucceeded StepStatus = "succeeded"
	StepFailed    StepStatus = "failed"
	StepCanceled  StepStatus = "canceled"
	StepSkipped   StepStatus = "skipped"
)

// Terminal reports whether a step in state s has ended: it changes no more.
func (s StepStatus) Terminal() bool {
	return s == StepSucceeded || s == StepFailed || s == StepCanceled || s == StepSkipped
}

// AttemptStatus is the state of one try of a step: running → succeeded | failed |
// timed_out | interrupted | canceled. Interrupted means the lease ended without an
// outcome from the handler (expired, or handed back at shutdown); it is never
// written as canceled, which only RunCancel writes.
type AttemptStatus string

// Attempt states.
const (
	AttemptRunning     AttemptStatus = "running"
	AttemptSucceeded   AttemptStatus = "succeeded"
	AttemptFailed      AttemptStatus = "failed"
	AttemptTimedOut    AttemptStatus = "timed_out"
	AttemptInterrupted AttemptStatus = "interrupted"
	AttemptCanceled    AttemptStatus = "canceled"
)

// Outcome is how an attempt ended, as a dispatcher reports it to StepFinish or
// StepFinishBatch.
type Outcome string

// Attempt outcomes.
const (
	OutcomeSucceeded   Outcome = "succeeded"
	OutcomeFailed      Outcome = "failed"
	OutcomeTimedOut    Outcome = "timed_out"
	OutcomeInterrupted Outcome = "interrupted"
	// OutcomeHandback returns the lease at shutdown: the attempt is recorded
	// interrupted, does not count against max_attempts, and the step is ready at once.
	OutcomeHandback Outcome = "handback"
	// OutcomeInfraFailed reports a failure of Cairn's own infrastructure (blob store
	// down while storing the output, bundle not fetchable): the attempt is failed but
	// does not count against max_attempts, and the step retries after RetryIn.
	OutcomeInfraFailed Outcome = "infra_failed"
)

// EventType is the type of an entry of a run's history (Event.Type).
type EventType string

// Final reports whether an event of type t ends a run's history: the event of a
// terminal run status, run.<status> (run.succeeded, run.failed, run.canceled).
// A retry of the run writes more events after it (run.retried).
func (t EventType) Final() bool {
	st, ok := strings.CutPrefix(string(t), "run.")
	return ok && RunStatus(st).Terminal()
}

// Event types. The SQL functions write all but step.checkpointed (StepCheckpoint)
// and step.progress (StepEvent).
const (
	EventRunCreated       EventType = "run.created"
	EventRunSucceeded     EventType = "run.succeeded"
	EventRunFailed        EventType = "run.failed"
	EventRunCanceled      EventType = "run.canceled"
	EventStepStarted      EventType = "step.started"
	EventStepSucceeded    EventType = "step.succeeded"
	EventStepRetrying     EventType = "step.retrying"
	EventStepFailed       EventType = "step.failed"
	EventStepSkipped      EventType = "step.skipped"
	EventStepHandedBack   EventType = "step.handed_back"
	EventStepCheckpointed EventType = "step.checkpointed"
	EventStepProgress     EventType = "step.progress"
	// Operator actions (docs/operations.md); their data names the actor.
	EventRunRetried EventType = "run.retried"
	EventRunPaused  EventType = "run.paused"
	EventRunResumed EventType = "run.resumed"
	// EventStepReused lists the steps a rerun carried over from its source run
	// (data: steps, rerun_of); they have no attempt.
	EventStepReused EventType = "step.reused"
	// Waits (wait.go). step.suspended: data kind, until, name, timeout_at,
	// on_timeout. step.resumed: data kind, outcome, reason (sleep_done, signal,
	// timeout, …); step.succeeded or step.failed follows. signal.received: data
	// name, seq, actor, idempotency_key.
	EventStepSuspended  EventType = "step.suspended"
	EventStepResumed    EventType = "step.resumed"
	EventSignalReceived EventType = "signal.received"
	// Approvals (approval.go). step.approved: data actor, comment, approvals,
	// required. step.rejected: data actor, comment (step.failed follows, code
	// rejected).
	EventStepApproved EventType = "step.approved"
	EventStepRejected EventType = "step.rejected"
	// Callbacks (wait.go). step.callback_received: data outcome; a callback that
	// came while its attempt still ran, kept until the step suspends (then
	// step.suspended and step.resumed, reason callback, follow at once).
	EventStepCallbackReceived EventType = "step.callback_received"
	// Failure handling (condition.go). run.compensating: data step (the failed step)
	// and steps (the handlers, in the order they run). step.skipped gains reasons
	// (step key → SkipReason) or, for one step, reason and because.
	EventRunCompensating EventType = "run.compensating"
)

// TriggerRule says when a step runs, given how the steps it needs ended (after:
// in the manifest). The catalog decides it in the transaction that settles the
// last upstream step; a step whose rule can no longer hold is skipped.
type TriggerRule string

// Trigger rules.
const (
	// TriggerAllSucceeded (the default): every upstream step succeeded.
	TriggerAllSucceeded TriggerRule = "all_succeeded"
	// TriggerAllDone: every upstream step ended, however.
	TriggerAllDone TriggerRule = "all_done"
	// TriggerNoneFailed: every upstream step ended, none failed.
	TriggerNoneFailed TriggerRule = "none_failed"
	// TriggerAnyFailed: every upstream step ended, at least one failed.
	TriggerAnyFailed TriggerRule = "any_failed"
)

// SkipReason says why a step was skipped (Step.SkipReason).
type SkipReason string

// Skip reasons.
const (
	// SkipConditionFalse: its when was false.
	SkipConditionFalse SkipReason = "condition_false"
	// SkipUpstreamFailed: a step it needs failed (all_succeeded, none_failed).
	SkipUpstreamFailed SkipReason = "upstream_failed"
	// SkipUpstreamSkipped: a step it needs was skipped (all_succeeded).
	SkipUpstreamSkipped SkipReason = "upstream_skipped"
	// SkipNoUpstreamFailed: every step it needs ended and none failed (any_failed).
	SkipNoUpstreamFailed SkipReason = "no_upstream_failed"
)

// Condition is the state of a step's when (Step.Condition).
type Condition string

// Condition states.
const (
	ConditionPending Condition = "pending"
	ConditionTrue    Condition = "true"
	ConditionFalse   Condition = "false"
	// ConditionError: the expression failed; the step failed (code expression).
	ConditionError Condition = "error"
)

// Phase says what a step of a run is: a step of the DAG or a failure handler.
type Phase string

// Phases.
const (
	PhaseMain       Phase = "main"
	PhaseCompensate Phase = "compensate"
	PhaseOnFailure  Phase = "on_failure"
)

// ScheduleEventType is the type of an entry of a schedule's history (table
// schedule_events): an operator's action, recorded with its actor.
type ScheduleEventType string

// Schedule event types. cairn_schedule_pause writes paused and resumed;
// ScheduleTrigger and ScheduleBackfill triggered and backfilled; a fire
// (ScheduleFire) quota_skipped.
const (
	EventSchedulePaused     ScheduleEventType = "schedule.paused"
	EventScheduleResumed    ScheduleEventType = "schedule.resumed"
	EventScheduleTriggered  ScheduleEventType = "schedule.triggered"
	EventScheduleBackfilled ScheduleEventType = "schedule.backfilled"
	// EventScheduleQuotaSkipped is a fire skipped because its namespace was over
	// its runs_per_minute quota (actor "schedule"; data: fire_at, namespace,
	// quota, limit). The fire counts as skipped, as an overlap skip does.
	EventScheduleQuotaSkipped ScheduleEventType = "schedule.quota_skipped"
)
