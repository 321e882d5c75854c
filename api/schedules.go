package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/namespace"
)

// maxBackfill bounds the fire times one backfill creates runs for.
const maxBackfill = 10_000

// Schedule is a schedule of a workflow's manifest (`schedules:`), as the catalog
// keeps it for the version the workflow's alias latest names.
type Schedule struct {
	ID             int64      `json:"id" doc:"the schedule's id, in /v1/schedules/{id} and in its runs' idempotency keys (schedule:<id>:<fire time>)"`
	Workflow       string     `json:"workflow"`
	Name           string     `json:"name" doc:"the name in the manifest; the runs it creates carry the label schedule=<name>"`
	Version        int        `json:"version" doc:"the version whose manifest the schedule comes from: the one latest names, while active"`
	Cron           string     `json:"cron"`
	Timezone       string     `json:"timezone" doc:"IANA time zone the cron is read in"`
	Input          any        `json:"input,omitempty" doc:"the input of every run it creates"`
	Overlap        string     `json:"overlap" enum:"skip,allow,buffer_one,cancel_other"`
	Catchup        string     `json:"catchup" doc:"how late a missed fire may still be created (Go duration, 0s by default; at least 1m applies)"`
	Active         bool       `json:"active" doc:"false when the version latest names has no schedule of this name: it fires nothing"`
	Paused         bool       `json:"paused"`
	NextFireAt     *time.Time `json:"next_fire_at" doc:"the next fire; null while paused or inactive, or until a server has computed it (within a poll interval of a deploy or resume)"`
	LastFireAt     *time.Time `json:"last_fire_at" doc:"the latest fire time that created (or, buffer_one, holds) a run"`
	LastRunID      *string    `json:"last_run_id" doc:"the run of the latest fire or trigger: overlap looks at it"`
	BufferedFireAt *time.Time `json:"buffered_fire_at,omitempty" doc:"buffer_one: the fire waiting for last_run_id to end"`
	Fires          int64      `json:"fires" doc:"runs created by fires"`
	Skipped        int64      `json:"skipped" doc:"fires that created no run: overlap, or missed beyond the catchup window"`
	LastSkippedAt  *time.Time `json:"last_skipped_at,omitempty"`
	UpdatedAt      time.Time  `json:"updated_at"`
	UpdatedBy      string     `json:"updated_by" doc:"who changed it last: the deployer (or whoever moved latest), or the operator who paused or resumed it"`
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

func scheduleOf(sc *catalog.Schedule) Schedule {
	out := Schedule{
		ID: sc.ID, Workflow: namespace.Strip(sc.Workflow), Name: sc.Name, Version: sc.Version, Cron: sc.Cron, Timezone: sc.Timezone,
		Overlap: sc.Overlap, Catchup: sc.Catchup().String(), Active: sc.Active, Paused: sc.Paused,
		NextFireAt: utcPtr(sc.NextFireAt), LastFireAt: utcPtr(sc.LastFireAt), LastRunID: parentOf(sc.LastRunID),
		BufferedFireAt: utcPtr(sc.BufferedFireAt), Fires: sc.Fires, Skipped: sc.Skipped,
		LastSkippedAt: utcPtr(sc.LastSkippedAt), UpdatedAt: sc.UpdatedAt.UTC(), UpdatedBy: sc.UpdatedBy,
	}
	if len(sc.Input) > 0 {
		out.Input = json.RawMessage(sc.Input)
	}
	return out
}

type scheduleOutput struct{ Body Schedule }

// ScheduleIDParam is the {id} path parameter of a schedule.
type ScheduleIDParam struct {
	ID int64 `path:"id" minimum:"1" doc:"schedule id (GET /v1/schedules)"`
}

// BackfillBody is the body of POST /v1/schedules/{id}/backfill.
type BackfillBody struct {
	From time.Time `json:"from" doc:"first instant (RFC 3339), included"`
	To   time.Time `json:"to" doc:"last instant (RFC 3339), excluded"`
}

// BackfillResult is the answer of a backfill.
type BackfillResult struct {
	Fires   int `json:"fires" doc:"fire times of the schedule's cron in [from, to)"`
	Created int `json:"created" doc:"runs created"`
	Skipped int `json:"skipped" doc:"fire times that had their run already (fired, or backfilled before): nothing created"`
}

type backfillOutput struct{ Body BackfillResult }

// ScheduleListParams are the filters of GET /v1/schedules.
type ScheduleListParams struct {
	Workflow string `query:"workflow" pattern:"^[a-z0-9][a-z0-9-]*$" maxLength:"63" doc:"only this workflow's schedules"`
}

func (s *Server) registerSchedules() {
	register(s, huma.Operation{
		OperationID: "listSchedules",
		Method:      http.MethodGet,
		Path:        "/v1/schedules",
		Summary:     "List schedules",
		Description: "The schedules of every workflow's manifest (`schedules:` of the version its alias latest names; those a later latest lacks stay listed, inactive), ordered by id, keyset-paginated.",
		Tags:        []string{"schedules"},
	}, RoleViewer, []problemClass{classInvalidCursor}, func(ctx context.Context, in *struct {
		ScheduleListParams
		PageParams
	}) (*listOutput[Schedule], error) {
		var after int64
		in.Workflow = qualify(ctx, in.Workflow)
		if err := s.decodeCursor(in.Cursor, "schedules", in.Workflow, &after); err != nil {
			return nil, err
		}
		rows, err := s.store.ScheduleList(ctx, &catalog.ScheduleListParams{Workflow: in.Workflow, After: after, Limit: in.Limit + 1,
			Namespace: requestNamespace(ctx)})
		if err != nil {
			return nil, err
		}
		out := &listOutput[Schedule]{}
		out.Body.Items = make([]Schedule, 0, len(rows))
		for i := range rows {
			if i == in.Limit {
				out.Body.NextCursor = s.encodeCursor("schedules", in.Workflow, rows[i-1].ID)
				break
			}
			out.Body.Items = append(out.Body.Items, scheduleOf(&rows[i]))
		}
		return out, nil
	})

	register(s, huma.Operation{
		OperationID: "getSchedule",
		Method:      http.MethodGet,
		Path:        "/v1/schedules/{id}",
		Summary:     "Get a schedule",
		Tags:        []string{"schedules"},
	}, RoleViewer, []problemClass{classNotFound}, func(ctx context.Context, in *ScheduleIDParam) (*scheduleOutput, error) {
		sc, err := s.store.ScheduleGet(ctx, in.ID)
		if err != nil {
			return nil, scheduleNotFound(err, in.ID)
		}
		return &scheduleOutput{Body: scheduleOf(sc)}, nil
	})

	for _, pause := range []bool{true, false} {
		verb, summary, desc := "resume", "Resume a schedule",
			"The schedule fires again, from its first fire time after now: fires missed while it was paused are not made up. Resuming a schedule that is not paused changes nothing. An event schedule.resumed names the actor."
		if pause {
			verb, summary, desc = "pause", "Pause a schedule",
				"The schedule fires nothing until resumed (runs it created go on). The pause survives deploys, promotions and rollbacks. Pausing a paused schedule changes nothing. An event schedule.paused names the actor."
		}
		register(s, huma.Operation{
			OperationID: verb + "Schedule",
			Method:      http.MethodPost,
			Path:        "/v1/schedules/{id}/" + verb,
			Summary:     summary,
			Description: desc,
			Tags:        []string{"schedules"},
		}, RoleOperator, []problemClass{classNotFound}, func(ctx context.Context, in *ScheduleIDParam) (*scheduleOutput, error) {
			if _, err := s.store.SchedulePause(ctx, in.ID, pause, actor(ctx)); err != nil {
				return nil, scheduleNotFound(err, in.ID)
			}
			sc, err := s.store.ScheduleGet(ctx, in.ID)
			if err != nil {
				return nil, scheduleNotFound(err, in.ID)
			}
			return &scheduleOutput{Body: scheduleOf(sc)}, nil
		})
	}

	register(s, huma.Operation{
		OperationID:   "triggerSchedule",
		Method:        http.MethodPost,
		Path:          "/v1/schedules/{id}/trigger",
		Summary:       "Start a schedule's run now",
		Description:   "Creates a run of the schedule now (its version, input and label schedule=<name>), whatever its overlap policy and even when paused: an operator asked for it. The run becomes the schedule's last run (later fires' overlap looks at it); the schedule's fire times do not change. An inactive schedule is a 409 conflict. An event schedule.triggered names the actor. Answers 202 with the run.",
		Tags:          []string{"schedules"},
		DefaultStatus: http.StatusAccepted,
	}, RoleOperator, []problemClass{classNotFound, classConflict, classQuotaExceeded}, func(ctx context.Context, in *ScheduleIDParam) (*runOutput, error) {
		run, err := s.store.ScheduleTrigger(ctx, in.ID, actor(ctx))
		if err != nil {
			if errors.Is(err, catalog.ErrConflict) {
				return nil, withDetail(err, "schedule %d is inactive: the version its workflow's latest names has no such schedule", in.ID)
			}
			return nil, scheduleNotFound(err, in.ID)
		}
		return &runOutput{Body: runOf(run)}, nil
	})

	register(s, huma.Operation{
		OperationID: "backfillSchedule",
		Method:      http.MethodPost,
		Path:        "/v1/schedules/{id}/backfill",
		Summary:     "Create the runs of a schedule's past (or future) fire times",
		Description: fmt.Sprintf("Creates a run for every fire time of the schedule's cron (in its time zone) in [from, to), each with the idempotency key of that fire (schedule:<id>:<fire time>): a fire time that has its run already (fired, or backfilled before) creates nothing, so repeating a backfill creates nothing new. Overlap does not apply; the schedule's next fire does not change; works on paused and inactive schedules too. At most %d fire times (else 422 naming body.to); all are created in one transaction. An event schedule.backfilled names the actor.", maxBackfill),
		Tags:        []string{"schedules"},
	}, RoleOperator, []problemClass{classNotFound, classQuotaExceeded}, func(ctx context.Context, in *struct {
		ScheduleIDParam
		Body BackfillBody
	}) (*backfillOutput, error) {
		from, to := in.Body.From, in.Body.To
		if !to.After(from) {
			return nil, &validationError{errs: []error{&huma.ErrorDetail{Location: "body.to",
				Message: "must be after from", Value: to.Format(time.RFC3339)}}}
		}
		sc, err := s.store.ScheduleGet(ctx, in.ID)
		if err != nil {
			return nil, scheduleNotFound(err, in.ID)
		}
		loc, err := time.LoadLocation(sc.Timezone)
		if err != nil {
			return nil, fmt.Errorf("schedule %d: time zone %q: %w", sc.ID, sc.Timezone, err)
		}
		cs, err := bundle.ParseCron(sc.Cron, loc)
		if err != nil {
			return nil, fmt.Errorf("schedule %d: cron %q: %w", sc.ID, sc.Cron, err)
		}
		var fires []time.Time
		// The first fire at or after from: NextFire is strictly after.
		for at, ok := bundle.NextFire(cs, from.Add(-time.Nanosecond)); ok && at.Before(to); at, ok = bundle.NextFire(cs, at) {
			if len(fires) == maxBackfill {
				return nil, &validationError{errs: []error{&huma.ErrorDetail{Location: "body.to",
					Message: "more than " + strconv.Itoa(maxBackfill) + " fire times between from and to: backfill a shorter range at a time",
					Value:   to.Format(time.RFC3339)}}}
			}
			fires = append(fires, at)
		}
		created, skipped, err := s.store.ScheduleBackfill(ctx, sc.ID, fires, actor(ctx))
		if err != nil {
			return nil, scheduleNotFound(err, in.ID)
		}
		return &backfillOutput{Body: BackfillResult{Fires: len(fires), Created: created, Skipped: skipped}}, nil
	})
}

// scheduleNotFound names the schedule when err is ErrNotFound.
func scheduleNotFound(err error, id int64) error {
	if errors.Is(err, catalog.ErrNotFound) {
		return withDetail(err, "no schedule %d", id)
	}
	return err
}
