package catalog

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
)

const (
	scheduleColumns = `id, workflow, name, version, cron, timezone, input, overlap,
(extract(epoch FROM catchup) * 1000)::bigint AS catchup_ms, active, paused, next_fire_at,
last_fire_at, last_run_id, buffered_fire_at, fires, skipped, last_skipped_at, created_at,
updated_at, updated_by`

	sqlScheduleGet = `SELECT ` + scheduleColumns + ` FROM schedules WHERE id = $1`

	// sqlScheduleList is a page of schedules ($3 at most) by id, of workflow $1 (all
	// when ''), after id $2.
	sqlScheduleList = `
SELECT ` + scheduleColumns + ` FROM schedules
WHERE ($1 = '' OR workflow = $1) AND id > $2 AND ($4::text IS NULL OR cairn_namespace(workflow) = $4::text)
ORDER BY id
LIMIT $3`

	// sqlScheduleClaim takes up to $1 schedules the fire loop has work for: due (or
	// whose next fire is still to be computed), or holding a buffered fire. Rows
	// another loop holds are skipped: each is worked by one loop at a time, and the
	// fire and the advance of next_fire_at commit together.
	sqlScheduleClaim = `
SELECT ` + scheduleColumns + `, now() AS db_now FROM schedules
WHERE active AND NOT paused
  AND (next_fire_at IS NULL OR next_fire_at <= now() OR buffered_fire_at IS NOT NULL)
ORDER BY next_fire_at NULLS FIRST
LIMIT $1
FOR UPDATE SKIP LOCKED`

	// sqlScheduleAdvance records a fire loop's pass over schedule $1.
	sqlScheduleAdvance = `
UPDATE schedules SET next_fire_at = $2, last_fire_at = coalesce($3, last_fire_at),
    last_run_id = $4, buffered_fire_at = $5, fires = fires + $6, skipped = skipped + $7,
    last_skipped_at = coalesce($8, last_skipped_at), active = $9
WHERE id = $1`

	// sqlScheduleNextDue is the earliest next fire of the active, unpaused schedules.
	sqlScheduleNextDue = `SELECT min(next_fire_at) FROM schedules WHERE active AND NOT paused`

	sqlScheduleRunStatus = `SELECT status FROM runs WHERE id = $1`

	sqlScheduleLastRun = `UPDATE schedules SET last_run_id = $2 WHERE id = $1`

	sqlSchedulePause = `SELECT cairn_schedule_pause($1, $2, $3)`

	sqlScheduleLock = `SELECT ` + scheduleColumns + ` FROM schedules WHERE id = $1 FOR UPDATE`

	sqlScheduleEvent = `INSERT INTO schedule_events (schedule_id, type, actor, data) VALUES ($1, $2, $3, $4)`

	// One schedule's part of a fire pass is a savepoint: see ScheduleFire.
	sqlScheduleSavepoint  = `SAVEPOINT schedule_fire`
	sqlScheduleRollbackTo = `ROLLBACK TO SAVEPOINT schedule_fire`
	sqlScheduleRelease    = `RELEASE SAVEPOINT schedule_fire`

	// A fire's run of a namespace other than default is a savepoint of its own:
	// the namespace's runs_per_minute quota may refuse it (fire.create).
	sqlScheduleRunSavepoint  = `SAVEPOINT schedule_run`
	sqlScheduleRunRollbackTo = `ROLLBACK TO SAVEPOINT schedule_run`
	sqlScheduleRunRelease    = `RELEASE SAVEPOINT schedule_run`
)

// Schedule is a schedule of a workflow's manifest (bundle.Schedule), as the catalog
// keeps it: one row per (workflow, name), following the version the workflow's alias
// latest names (the trigger workflow_aliases_schedules in catalog/sql/triggers.sql
// is the one place that syncs it).
type Schedule struct {
	ID       int64  `db:"id"`
	Workflow string `db:"workflow"`
	Name     string `db:"name"`
	// Version is the version whose definition the schedule comes from: latest's while
	// Active.
	Version  int    `db:"version"`
	Cron     string `db:"cron"`
	Timezone string `db:"timezone"`
	// Input of every run the schedule creates; nil for none.
	Input   JSON   `db:"input"`
	Overlap string `db:"overlap"`
	// CatchupMS is the catchup window in milliseconds.
	CatchupMS int64 `db:"catchup_ms"`
	// Active is false when latest's version has no schedule of this name.
	Active bool `db:"active"`
	Paused bool `db:"paused"`
	// NextFireAt is nil while the next fire is still to be computed (a new, changed,
	// resumed or inactive schedule).
	NextFireAt *time.Time `db:"next_fire_at"`
	LastFireAt *time.Time `db:"last_fire_at"`
	// LastRunID is the run of the latest fire (or trigger).
	LastRunID *uuid.UUID `db:"last_run_id"`
	// BufferedFireAt is the fire an overlap buffer_one schedule holds until its
	// last run ends.
	BufferedFireAt *time.Time `db:"buffered_fire_at"`
	// Fires counts the runs fires created; Skipped the fires that created none
	// (overlap, or missed beyond the catchup window).
	Fires         int64      `db:"fires"`
	Skipped       int64      `db:"skipped"`
	LastSkippedAt *time.Time `db:"last_skipped_at"`
	CreatedAt     time.Time  `db:"created_at"`
	UpdatedAt     time.Time  `db:"updated_at"`
	UpdatedBy     string     `db:"updated_by"`
}

// Catchup returns the catchup window.
func (s Schedule) Catchup() time.Duration { return time.Duration(s.CatchupMS) * time.Millisecond }

// The overlap policies of bundle.Overlap, as the catalog stores them.
const (
	OverlapSkip        = "skip"
	OverlapAllow       = "allow"
	OverlapBufferOne   = "buffer_one"
	OverlapCancelOther = "cancel_other"
)

// ScheduleLabel is the run label naming the schedule that created the run.
const ScheduleLabel = "schedule"

// scheduleScope is the idempotency scope of the runs schedules create.
const scheduleScope = "schedule"

// ScheduleFireKey is the idempotency key of the run of schedule id's fire at t:
// schedule:<id>:<t in RFC 3339, UTC>. A fire, a backfill and a repeat of either
// share it, so each fire time has at most one run.
func ScheduleFireKey(id int64, t time.Time) string {
	return fmt.Sprintf("schedule:%d:%s", id, t.UTC().Format(time.RFC3339Nano))
}

// ScheduleGet returns schedule id. ErrNotFound if there is none.
func (s *Store) ScheduleGet(ctx context.Context, id int64) (*Schedule, error) {
	var out Schedule
	if err := s.db.GetContext(ctx, &out, sqlScheduleGet, id); err != nil {
		return nil, fmt.Errorf("get schedule %d: %w", id, translateError(err))
	}
	return &out, nil
}

// ScheduleListParams select a page of schedules.
type ScheduleListParams struct {
	// Workflow, when set, keeps that workflow's schedules.
	Workflow string
	// After is the last id of the previous page; 0 for the first.
	After int64
	// Limit is the page size; default 100.
	Limit int
	// Namespace, when not empty, keeps its schedules only (package namespace).
	Namespace string
}

// ScheduleList returns a page of schedules by id, active or not.
func (s *Store) ScheduleList(ctx context.Context, p *ScheduleListParams) ([]Schedule, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	out := []Schedule{}
	if err := s.db.SelectContext(ctx, &out, sqlScheduleList, p.Workflow, p.After, limit, nullString(p.Namespace)); err != nil {
		return nil, fmt.Errorf("list schedules: %w", translateError(err))
	}
	return out, nil
}

// SchedulePause pauses (paused true) or resumes a schedule, with actor: a paused
// schedule fires nothing; a resumed one fires from its next fire time after the
// resume (the fires it missed while paused are not made up). changed is false when
// it was so already (no event then). ErrNotFound if there is no such schedule.
func (s *Store) SchedulePause(ctx context.Context, id int64, paused bool, actor string) (changed bool, err error) {
	err = s.inTx(ctx, func(tx *sqlx.Tx) error {
		return tx.GetContext(ctx, &changed, sqlSchedulePause, id, paused, actor)
	})
	if err != nil {
		return false, fmt.Errorf("pause schedule %d: %w", id, err)
	}
	return changed, nil
}

// scheduleRun creates the run of schedule sc's fire at (key from it) or, with a
// zero at, a run with no idempotency key (a trigger).
func scheduleRun(ctx context.Context, tx *sqlx.Tx, sc *Schedule, at time.Time) (*Run, bool, error) {
	p := &RunCreateParams{
		Workflow: sc.Workflow,
		Version:  sc.Version,
		Input:    []byte(sc.Input),
		Labels:   Labels{ScheduleLabel: sc.Name},
	}
	if !at.IsZero() {
		p.IdempotencyKey = ScheduleFireKey(sc.ID, at)
		p.IdempotencyScope = scheduleScope
		p.RequestHash = scheduleScope
	}
	// A fire's key never expires: a backfill over old fire times must still
	// find the runs made for them.
	run, created, err := runCreateTx(ctx, tx, p, 0, true)
	if err != nil {
		return nil, false, fmt.Errorf("create run of schedule %d (%s/%s): %w", sc.ID, sc.Workflow, sc.Name, err)
	}
	return run, created, nil
}

// ScheduleTrigger creates a run of schedule id now, whatever its overlap policy and
// pause state (an operator asked for it), labeled schedule=<name>, and records it as
// the schedule's last run with a schedule.triggered event naming actor. ErrNotFound
// if there is no such schedule; ErrConflict if it is inactive (latest's version has
// no such schedule).
func (s *Store) ScheduleTrigger(ctx context.Context, id int64, actor string) (*Run, error) {
	var run *Run
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		var sc Schedule
		if err := tx.GetContext(ctx, &sc, sqlScheduleLock, id); err != nil {
			return err
		}
		if !sc.Active {
			return fmt.Errorf("%w: schedule %d is inactive: version %d of %s, the one latest names, has no schedule %q",
				ErrConflict, id, sc.Version, sc.Workflow, sc.Name)
		}
		var err error
		if run, _, err = scheduleRun(ctx, tx, &sc, time.Time{}); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, sqlScheduleLastRun, id, run.ID); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, sqlScheduleEvent, id, EventScheduleTriggered, actor,
			JSON(fmt.Sprintf(`{"run_id":%q}`, run.ID)))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("trigger schedule %d: %w", id, err)
	}
	return run, nil
}

// ScheduleBackfill creates a run of schedule id for every fire time in fires (the
// caller computes them from the schedule's cron), with each fire's idempotency key:
// a time that already has its run (fired, or backfilled before) creates nothing and
// counts as skipped. Overlap does not apply and the schedule's next fire is not
// changed. One transaction: all or none. A schedule.backfilled event names actor.
// ErrNotFound if there is no such schedule.
func (s *Store) ScheduleBackfill(ctx context.Context, id int64, fires []time.Time, actor string) (created, skipped int, err error) {
	err = s.inTx(ctx, func(tx *sqlx.Tx) error {
		created, skipped = 0, 0
		var sc Schedule
		if err := tx.GetContext(ctx, &sc, sqlScheduleGet, id); err != nil {
			return err
		}
		for _, at := range fires {
			_, made, err := scheduleRun(ctx, tx, &sc, at)
			if err != nil {
				return err
			}
			if made {
				created++
			} else {
				skipped++
			}
		}
		data := fmt.Sprintf(`{"fires":%d,"created":%d,"skipped":%d}`, len(fires), created, skipped)
		_, err := tx.ExecContext(ctx, sqlScheduleEvent, id, EventScheduleBackfilled, actor, JSON(data))
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("backfill schedule %d: %w", id, err)
	}
	return created, skipped, nil
}

// NextFireFunc returns the first fire time of a schedule's cron, read in its
// timezone, strictly after t; false when it has none. The fire loop's caller
// provides it (bundle.ParseCron and bundle.NextFire), so that the catalog does not
// parse cron itself.
type NextFireFunc func(cron, timezone string, t time.Time) (time.Time, bool)

// ScheduleFireParams configure one pass of the fire loop.
type ScheduleFireParams struct {
	// Limit is how many schedules one pass takes; default 50.
	Limit int
	// Next computes fire times; required.
	Next NextFireFunc
	// Grace is the lateness every fire is allowed whatever its schedule's catchup
	// (a fire is created while it is at most max(catchup, Grace) old); default 1m.
	Grace time.Duration
}

// ScheduleFireResult is what one pass did.
type ScheduleFireResult struct {
	// Schedules is how many schedules the pass took.
	Schedules int
	// Created and Skipped count the fires that created a run and those that did
	// not (overlap, or too old).
	Created, Skipped int
	// NextDue is the earliest next fire of any active schedule after the pass; nil
	// when none.
	NextDue *time.Time
	// Failed holds an error for each schedule whose fire failed (its run could not
	// be created): its part of the pass was rolled back, the others committed, and
	// it stays due, so the next pass tries it again.
	Failed []error
}

// maxFiresPerPass bounds the fire times one pass walks for one schedule: past it, the
// older ones (all beyond any catchup window) are skipped in one go.
const maxFiresPerPass = 100_000

// ScheduleFire is one pass of the fire loop: in one transaction it takes up to
// p.Limit schedules that are due (FOR UPDATE SKIP LOCKED: concurrent passes of other
// servers take other rows), creates the run of each due fire time with its
// idempotency key, and advances next_fire_at, so a fire is created exactly once
// whatever the number of servers. For each schedule:
//
//   - next_fire_at NULL (new, changed, resumed): it becomes the first fire after now;
//     nothing fires.
//   - every fire time from next_fire_at up to now, in order: one older than
//     max(catchup, Grace) is skipped (missed while no server ran); the others apply
//     overlap against the schedule's last run when it is unfinished: skip skips,
//     allow creates, cancel_other cancels the last run then creates, buffer_one
//     keeps the fire (at most one; further ones are skipped) until the last run
//     ends, and creates it then.
func (s *Store) ScheduleFire(ctx context.Context, p *ScheduleFireParams) (*ScheduleFireResult, error) {
	if p.Next == nil {
		return nil, fmt.Errorf("fire schedules: %w: no NextFireFunc", ErrInvalidInput)
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 50
	}
	grace := p.Grace
	if grace <= 0 {
		grace = time.Minute
	}
	var res ScheduleFireResult
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		res = ScheduleFireResult{}
		type claimed struct {
			Schedule
			DBNow time.Time `db:"db_now"`
		}
		var rows []claimed
		if err := tx.SelectContext(ctx, &rows, sqlScheduleClaim, limit); err != nil {
			return err
		}
		res.Schedules = len(rows)
		for i := range rows {
			sc := &rows[i].Schedule
			// A schedule whose fire fails (its run cannot be created) is rolled
			// back alone and reported; the others of the pass go on.
			if _, err := tx.ExecContext(ctx, sqlScheduleSavepoint); err != nil {
				return err
			}
			f := &fire{tx: tx, sc: sc, now: rows[i].DBNow, next: p.Next, grace: grace}
			if err := f.run(ctx); err != nil {
				err = translateError(err)
				if errors.Is(err, ErrRetryable) || ctx.Err() != nil {
					return err // the whole pass again (inTx), or give up
				}
				if _, rerr := tx.ExecContext(ctx, sqlScheduleRollbackTo); rerr != nil {
					return rerr
				}
				res.Failed = append(res.Failed, fmt.Errorf("schedule %d (%s/%s): %w", sc.ID, sc.Workflow, sc.Name, err))
				continue
			}
			if _, err := tx.ExecContext(ctx, sqlScheduleRelease); err != nil {
				return err
			}
			res.Created += f.created
			res.Skipped += f.skipped
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("fire schedules: %w", err)
	}
	var next sql.NullTime
	if err := s.db.GetContext(ctx, &next, sqlScheduleNextDue); err != nil {
		return nil, fmt.Errorf("next schedule due: %w", translateError(err))
	}
	if next.Valid {
		res.NextDue = &next.Time
	}
	return &res, nil
}

// fire is one schedule's part of a ScheduleFire pass.
type fire struct {
	tx    *sqlx.Tx
	sc    *Schedule
	now   time.Time
	next  NextFireFunc
	grace time.Duration

	created, skipped int
	lastFire         *time.Time
	lastSkipped      *time.Time
}

func (f *fire) run(ctx context.Context) error {
	sc := f.sc
	active := true
	if sc.BufferedFireAt != nil {
		busy, err := f.lastRunBusy(ctx, false)
		if err != nil {
			return err
		}
		if !busy {
			at := *sc.BufferedFireAt
			sc.BufferedFireAt = nil
			if err := f.create(ctx, at); err != nil {
				return err
			}
		}
	}
	var next *time.Time
	switch {
	case sc.NextFireAt == nil:
		if n, ok := f.next(sc.Cron, sc.Timezone, f.now); ok {
			next = &n
		} else {
			active = false // a cron that never fires again (refused at deploy)
		}
	default:
		window := max(sc.Catchup(), f.grace)
		at := *sc.NextFireAt
		for n := 0; !at.After(f.now); n++ {
			if n >= maxFiresPerPass {
				// Far behind: everything up to now is beyond the window.
				f.skip(at)
				var ok bool
				if at, ok = f.next(sc.Cron, sc.Timezone, f.now); !ok {
					active = false
				}
				break
			}
			if f.now.Sub(at) > window {
				f.skip(at)
			} else if err := f.due(ctx, at); err != nil {
				return err
			}
			var ok bool
			if at, ok = f.next(sc.Cron, sc.Timezone, at); !ok {
				active = false
				break
			}
		}
		if active {
			next = &at
		}
	}
	_, err := f.tx.ExecContext(ctx, sqlScheduleAdvance, sc.ID, next, f.lastFire, sc.LastRunID,
		sc.BufferedFireAt, f.created, f.skipped, f.lastSkipped, active)
	return err
}

func (f *fire) skip(at time.Time) {
	f.skipped++
	f.lastSkipped = &at
}

// due applies the overlap policy to the fire at.
func (f *fire) due(ctx context.Context, at time.Time) error {
	sc := f.sc
	if sc.Overlap == OverlapAllow {
		return f.create(ctx, at)
	}
	busy, err := f.lastRunBusy(ctx, sc.Overlap == OverlapCancelOther)
	if err != nil {
		return err
	}
	if !busy {
		return f.create(ctx, at)
	}
	switch sc.Overlap {
	case OverlapCancelOther:
		reason := fmt.Sprintf("canceled by schedule %s: overlap cancel_other (fire at %s)", sc.Name, at.UTC().Format(time.RFC3339))
		if _, err := f.tx.ExecContext(ctx, sqlRunCancel, *sc.LastRunID, reason); err != nil {
			return err
		}
		return f.create(ctx, at)
	case OverlapBufferOne:
		if sc.BufferedFireAt == nil {
			sc.BufferedFireAt = &at
			f.lastFire = &at
			return nil
		}
		f.skip(at)
	default: // skip
		f.skip(at)
	}
	return nil
}

// lastRunBusy reports whether the schedule's last run is unfinished; lock takes its
// row lock (it is about to be canceled).
func (f *fire) lastRunBusy(ctx context.Context, lock bool) (bool, error) {
	if f.sc.LastRunID == nil {
		return false, nil
	}
	q := sqlScheduleRunStatus
	if lock {
		q += " FOR UPDATE"
	}
	var st RunStatus
	err := f.tx.GetContext(ctx, &st, q, *f.sc.LastRunID)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return !st.Terminal(), nil
}

// create makes the run of the fire at. A fire over its namespace's
// runs_per_minute quota (quota.go) is skipped, as an overlap skip is, with a
// schedule.quota_skipped event: a cron fire made late, when the quota has room
// again, would not be the fire the cron asked for.
func (f *fire) create(ctx context.Context, at time.Time) error {
	namespaced := strings.Contains(f.sc.Workflow, "/")
	if namespaced {
		if _, err := f.tx.ExecContext(ctx, sqlScheduleRunSavepoint); err != nil {
			return err
		}
	}
	run, made, err := scheduleRun(ctx, f.tx, f.sc, at)
	var quota *QuotaError
	if namespaced && errors.As(translateError(err), &quota) {
		if _, err := f.tx.ExecContext(ctx, sqlScheduleRunRollbackTo); err != nil {
			return err
		}
		f.skip(at)
		data, err := json.Marshal(map[string]any{"fire_at": at.UTC(), "namespace": quota.Namespace, "quota": quota.Quota,
			"limit": quota.Limit})
		if err != nil {
			return err
		}
		_, err = f.tx.ExecContext(ctx, sqlScheduleEvent, f.sc.ID, EventScheduleQuotaSkipped, "schedule", JSON(data))
		return err
	}
	if err != nil {
		return err
	}
	if namespaced {
		if _, err := f.tx.ExecContext(ctx, sqlScheduleRunRelease); err != nil {
			return err
		}
	}
	if made {
		f.created++
	}
	f.sc.LastRunID = &run.ID
	f.lastFire = &at
	return nil
}
