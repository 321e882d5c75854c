package api

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/expr"
	"github.com/cairnrun/cairn/internal/tracing"
	"github.com/cairnrun/cairn/namespace"
)

// Run is a run of a pinned workflow version.
type Run struct {
	ID           string            `json:"id" doc:"run ID (UUIDv7)"`
	Workflow     string            `json:"workflow"`
	Version      int               `json:"version" doc:"the version the run is pinned to"`
	Status       string            `json:"status" enum:"pending,running,paused,compensating,succeeded,failed,canceled"`
	PauseReason  string            `json:"pause_reason,omitempty" enum:"run,workflow,exhausted" doc:"only on a paused run: why. run: an operator paused it; workflow: its workflow is paused (resuming the workflow releases it); exhausted: a step with on_exhausted: pause would have failed and is parked"`
	Input        json.RawMessage   `json:"input" doc:"the run's input. In a list (GET /v1/runs), null when over 4 KiB: see input_omitted"`
	InputOmitted bool              `json:"input_omitted,omitempty" doc:"only in a list: true when the input is over 4 KiB (as JSON text, or as stored) and left out (input is null); GET /v1/runs/{id} has it whole"`
	Error        json.RawMessage   `json:"error" doc:"why the run failed or was canceled; null otherwise"`
	Revision     int64             `json:"revision" doc:"increments on every committed change; equals the seq of the run's newest event"`
	StepsTotal   int               `json:"steps_total"`
	StepsLeft    int               `json:"steps_remaining" doc:"steps not yet in a terminal state"`
	CreatedAt    time.Time         `json:"created_at"`
	StartedAt    *time.Time        `json:"started_at" doc:"when the first step started"`
	FinishedAt   *time.Time        `json:"finished_at"`
	RerunOf      *string           `json:"rerun_of,omitempty" format:"uuid" doc:"on a rerun (POST /v1/runs/{id}/rerun): the run it reran"`
	RerunFrom    *string           `json:"rerun_from_step,omitempty" doc:"on a rerun: the step it reran from"`
	Labels       map[string]string `json:"labels" doc:"the labels given at start; {} when none were"`
	ParentID     *string           `json:"parent_id" doc:"the run that started this one (a child run); null otherwise"`
	ParentStep   *string           `json:"parent_step,omitempty" doc:"on a child run started by a workflow step: that step's key in the parent run"`
}

func runOf(r *catalog.Run) Run {
	out := Run{
		ID: r.ID.String(), Workflow: namespace.Strip(r.Workflow), Version: r.Version, Status: string(r.Status),
		Input: jsonOrNull(r.Input), InputOmitted: r.InputOmitted, Error: jsonOrNull(r.Error), Revision: r.Revision,
		StepsTotal: r.StepsTotal, StepsLeft: r.StepsRemaining, CreatedAt: r.CreatedAt.UTC(),
		StartedAt: utc(r.StartedAt), FinishedAt: utc(r.FinishedAt), RerunFrom: r.RerunFromStep,
		Labels: labelsOf(r.Labels), ParentID: parentOf(r.ParentID), ParentStep: r.ParentStep,
	}
	if r.RerunOf != nil {
		id := r.RerunOf.String()
		out.RerunOf = &id
	}
	if r.PauseReason != nil {
		out.PauseReason = string(*r.PauseReason)
	}
	return out
}

// labelsOf returns a run's labels, never nil: the field is always an object.
func labelsOf(l catalog.Labels) map[string]string {
	if l == nil {
		return map[string]string{}
	}
	return l
}

func parentOf(id *uuid.UUID) *string {
	if id == nil {
		return nil
	}
	s := id.String()
	return &s
}

func jsonOrNull[T ~[]byte](b T) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return json.RawMessage(b)
}

// utc returns t in UTC, or nil.
func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// StartRunBody is the body of POST /v1/workflows/{name}/runs.
type StartRunBody struct {
	Version  int               `json:"version,omitempty" minimum:"0" maximum:"2147483647" doc:"version to run; when absent or 0, the version alias names"`
	Alias    string            `json:"alias,omitempty" pattern:"^[a-z][a-z0-9-]*$" maxLength:"63" doc:"alias whose version to run (latest when absent), resolved when the run is created: the run keeps that version when the alias moves. Not with version"`
	Input    json.RawMessage   `json:"input,omitempty" doc:"the run's input, any JSON value"`
	Labels   map[string]string `json:"labels,omitempty" maxProperties:"32" doc:"labels of the run, to find it by (GET /v1/runs?label=key=value): at most 32; keys like step keys (^[a-z0-9][a-z0-9_-]{0,62}$), values of at most 256 bytes of UTF-8"`
	Deadline *time.Time        `json:"deadline,omitempty" doc:"when the run fails (error code deadline_exceeded) if it has not ended (RFC 3339); default its creation plus the manifest's timeout, if any"`
	Priority *int              `json:"priority,omitempty" minimum:"0" maximum:"9" doc:"the priority of every step of the run (0..9, higher first), in place of the steps' own (priority in cairn.yaml, default 5)"`
}

type runOutput struct {
	Body Run
}

type startRunOutput struct {
	Status   int
	Location string `header:"Location"`
	Body     Run
}

// RunIDParam is the {id} path parameter of a run.
type RunIDParam struct {
	ID string `path:"id" format:"uuid" doc:"run ID"`
}

func (p RunIDParam) uuid() (uuid.UUID, error) {
	id, err := uuid.Parse(p.ID)
	if err != nil {
		return uuid.Nil, withDetail(errBadRequest, "the run ID is not a UUID")
	}
	return id, nil
}

// maxInputSize bounds a run's input (1 MiB); large data belongs in the blob store,
// passed by reference. It is the bound of a value an expression builds (a child
// run's input, a hook's input), so that no run's input gets past it.
const maxInputSize = expr.MaxValue

// maxListedInput is the largest input, in bytes (as JSON text and as stored), that
// a list of runs carries: a page of the largest size (1,000) then holds at most
// 4 MiB of inputs (a page of runs with 1 MiB inputs once made
// gigabytes of garbage).
const maxListedInput = 4 << 10

func (s *Server) registerRuns() {
	register(s, huma.Operation{
		OperationID:   "startRun",
		Method:        http.MethodPost,
		Path:          "/v1/workflows/{name}/runs",
		Summary:       "Start a run",
		Description:   "Starts a run of a version: the one given, or the one an alias names (latest unless given), resolved in the statement that creates the run; the run keeps that version when the alias moves. An unknown version or alias is a 404. The run, its steps and its first event are committed before the 202. With an Idempotency-Key, the same request returns the first run; a different request under the same key is a 409 idempotency_key_reused.",
		Tags:          []string{"runs"},
		DefaultStatus: http.StatusAccepted,
		MaxBodyBytes:  maxInputSize + 1024,
	}, RoleOperator, []problemClass{classNotFound, classIdempotencyReused, classQuotaExceeded}, func(ctx context.Context, in *struct {
		WorkflowNameParam
		IdempotencyKey string `header:"Idempotency-Key" maxLength:"255" doc:"makes the request safe to retry"`
		Body           *StartRunBody
	}) (*startRunOutput, error) {
		var body StartRunBody
		if in.Body != nil {
			body = *in.Body
		}
		if err := versionOrAlias(body.Version, body.Alias); err != nil {
			return nil, err
		}
		if err := checkLabels(body.Labels); err != nil {
			return nil, err
		}
		// One statement resolves the version (given, or the one the alias names:
		// latest unless given) and creates the run from the steps the version
		// recorded at upload.
		p := &catalog.RunCreateParams{Workflow: in.Name, Version: body.Version, Alias: body.Alias, Input: body.Input, Labels: body.Labels,
			Priority: body.Priority, Deadline: body.Deadline}
		if in.IdempotencyKey != "" {
			p.IdempotencyScope = "start_run:" + in.Name
			p.IdempotencyKey = in.IdempotencyKey
			p.RequestHash = requestHash(in.Name, &body)
		}
		run, _, err := s.store.RunCreate(ctx, p)
		if err == nil {
			tracing.LinkRun(ctx, run.ID)
		}
		switch {
		case errors.Is(err, catalog.ErrNotFound) && body.Version > 0:
			return nil, withDetail(err, "workflow %q has no version %d", in.Name, body.Version)
		case errors.Is(err, catalog.ErrNotFound):
			alias := cmp.Or(body.Alias, catalog.AliasLatest)
			if _, werr := s.store.WorkflowGet(ctx, in.Name); werr == nil {
				return nil, withDetail(err, "workflow %q has no alias %q: promote a version to it first", in.Name, alias)
			}
			return nil, withDetail(err, "no workflow %q: deploy a bundle first", in.Name)
		case err != nil:
			return nil, err
		}
		return &startRunOutput{Status: http.StatusAccepted, Location: "/v1/runs/" + run.ID.String(), Body: runOf(run)}, nil
	})

	register(s, huma.Operation{
		OperationID: "listRuns",
		Method:      http.MethodGet,
		Path:        "/v1/runs",
		Summary:     "List runs",
		Description: "Runs newest first, filtered by every filter given (workflow, status, label, version, created_after, created_before, error_code, parent); a cursor only works with the filters it was issued for. An input over 4 KiB (as JSON text, or as stored) is left out of its item (input null, input_omitted true), so that a page stays small: GET /v1/runs/{id} has it.",
		Tags:        []string{"runs"},
	}, RoleViewer, []problemClass{classInvalidCursor}, func(ctx context.Context, in *struct {
		RunFilterParams
		PageParams
	}) (*listOutput[Run], error) {
		p, err := in.listParams(ctx, "query.")
		if err != nil {
			return nil, err
		}
		filter := runFilterKey(p)
		if err := s.decodeCursor(in.Cursor, "runs", filter, &p.Before); err != nil {
			return nil, err
		}
		p.Limit, p.MaxInput = in.Limit+1, maxListedInput
		rows, err := s.store.RunList(ctx, p)
		if err != nil {
			return nil, err
		}
		out := &listOutput[Run]{}
		out.Body.Items = make([]Run, 0, len(rows))
		for i := range rows {
			if i == in.Limit {
				out.Body.NextCursor = s.encodeCursor("runs", filter, rows[i-1].ID)
				break
			}
			out.Body.Items = append(out.Body.Items, runOf(&rows[i]))
		}
		return out, nil
	})

	register(s, huma.Operation{
		OperationID: "getRun",
		Method:      http.MethodGet,
		Path:        "/v1/runs/{id}",
		Summary:     "Get a run",
		Description: "The run with its whole input.",
		Tags:        []string{"runs"},
	}, RoleViewer, []problemClass{classBadRequest, classNotFound}, func(ctx context.Context, in *RunIDParam) (*runOutput, error) {
		id, err := in.uuid()
		if err != nil {
			return nil, err
		}
		run, err := s.store.RunGet(ctx, id)
		if err != nil {
			return nil, err
		}
		return &runOutput{Body: runOf(run)}, nil
	})

	register(s, huma.Operation{
		OperationID: "cancelRun",
		Method:      http.MethodPost,
		Path:        "/v1/runs/{id}/cancel",
		Summary:     "Cancel a run",
		Description: "Waiting and ready steps become canceled; running handlers are killed by the dispatchers holding them. Canceling a finished run is a 409 run_finished.",
		Tags:        []string{"runs"},
	}, RoleOperator, []problemClass{classBadRequest, classNotFound, classRunFinished}, func(ctx context.Context, in *struct {
		RunIDParam
		Body *struct {
			Reason string `json:"reason,omitempty" maxLength:"1000" doc:"recorded on the run and its event"`
		}
	}) (*runOutput, error) {
		id, err := in.uuid()
		if err != nil {
			return nil, err
		}
		reason := "canceled by request"
		if in.Body != nil && in.Body.Reason != "" {
			reason = in.Body.Reason
		}
		if err := s.store.RunCancel(ctx, id, reason); err != nil {
			return nil, err
		}
		run, err := s.store.RunGet(ctx, id)
		if err != nil {
			return nil, err
		}
		return &runOutput{Body: runOf(run)}, nil
	})
}

// ControlBody is the optional body of the pause and resume operations.
type ControlBody struct {
	Reason string `json:"reason,omitempty" maxLength:"1000" doc:"a note recorded in the events, with the token's name"`
}

func (b *ControlBody) note() string {
	if b == nil {
		return ""
	}
	return b.Reason
}

func (s *Server) registerPause() {
	register(s, huma.Operation{
		OperationID: "pauseRun",
		Method:      http.MethodPost,
		Path:        "/v1/runs/{id}/pause",
		Summary:     "Pause a run",
		Description: "No new attempt of the run starts (within one poll interval of the answer); running attempts finish and their outcomes are recorded; the steps they make ready wait. A paused run still ends when its last steps finish, and can be canceled. Pausing a paused run changes nothing (200); a run paused by its workflow is from then on paused by the operator too (the workflow's resume no longer releases it). Pausing a finished run is a 409 invalid_run_state. Event run.paused with the actor.",
		Tags:        []string{"runs"},
	}, RoleOperator, []problemClass{classBadRequest, classNotFound, classInvalidRunState}, func(ctx context.Context, in *struct {
		RunIDParam
		Body *ControlBody
	}) (*runOutput, error) {
		id, err := in.uuid()
		if err != nil {
			return nil, err
		}
		if _, err := s.store.RunPause(ctx, id, actor(ctx), in.Body.note()); err != nil {
			return nil, err
		}
		return s.runAnswer(ctx, id)
	})

	register(s, huma.Operation{
		OperationID: "resumeRun",
		Method:      http.MethodPost,
		Path:        "/v1/runs/{id}/resume",
		Summary:     "Resume a paused run",
		Description: "Releases a paused run, whatever paused it (an operator, its workflow, a step's on_exhausted: pause: the parked step runs again with a fresh attempt budget): it is running again, or pending if no step has started. Resuming a run that is not paused is a 409 invalid_run_state. Event run.resumed with the actor.",
		Tags:        []string{"runs"},
	}, RoleOperator, []problemClass{classBadRequest, classNotFound, classInvalidRunState}, func(ctx context.Context, in *struct {
		RunIDParam
		Body *ControlBody
	}) (*runOutput, error) {
		id, err := in.uuid()
		if err != nil {
			return nil, err
		}
		if err := s.store.RunResume(ctx, id, actor(ctx), in.Body.note()); err != nil {
			return nil, err
		}
		return s.runAnswer(ctx, id)
	})

	register(s, huma.Operation{
		OperationID: "pauseWorkflow",
		Method:      http.MethodPost,
		Path:        "/v1/workflows/{name}/pause",
		Summary:     "Pause a workflow",
		Description: "Pauses every pending or running run of the workflow (pause_reason workflow; event run.paused with the actor) and creates its new runs paused until the workflow is resumed. Pausing a paused workflow keeps who paused it and when (200).",
		Tags:        []string{"workflows"},
	}, RoleOperator, []problemClass{classNotFound}, func(ctx context.Context, in *struct {
		WorkflowNameParam
		Body *ControlBody
	}) (*workflowOutput, error) {
		if _, err := s.store.WorkflowPause(ctx, in.Name, actor(ctx), in.Body.note()); err != nil {
			return nil, err
		}
		return s.workflowAnswer(ctx, in.Name)
	})

	register(s, huma.Operation{
		OperationID: "resumeWorkflow",
		Method:      http.MethodPost,
		Path:        "/v1/workflows/{name}/resume",
		Summary:     "Resume a workflow",
		Description: "The workflow is no longer paused: new runs start as usual, and the runs its pause held (pause_reason workflow) are released (event run.resumed with the actor). Runs paused one by one, or parked by a step's on_exhausted: pause, stay paused. Resuming a workflow that is not paused changes nothing (200).",
		Tags:        []string{"workflows"},
	}, RoleOperator, []problemClass{classNotFound}, func(ctx context.Context, in *struct {
		WorkflowNameParam
		Body *ControlBody
	}) (*workflowOutput, error) {
		if _, err := s.store.WorkflowResume(ctx, in.Name, actor(ctx), in.Body.note()); err != nil {
			return nil, err
		}
		return s.workflowAnswer(ctx, in.Name)
	})
}

func (s *Server) runAnswer(ctx context.Context, id uuid.UUID) (*runOutput, error) {
	run, err := s.store.RunGet(ctx, id)
	if err != nil {
		return nil, err
	}
	return &runOutput{Body: runOf(run)}, nil
}

func (s *Server) workflowAnswer(ctx context.Context, name string) (*workflowOutput, error) {
	w, err := s.store.WorkflowGet(ctx, name)
	if err != nil {
		return nil, err
	}
	return &workflowOutput{Body: workflowOf(w)}, nil
}

// versionOrAlias refuses a body that names both a version and an alias.
func versionOrAlias(version int, alias string) error {
	if version > 0 && alias != "" {
		return &validationError{errs: []error{&huma.ErrorDetail{Location: "body.alias",
			Message: "give a version or an alias, not both", Value: alias}}}
	}
	return nil
}

// requestHash identifies a start-run request for idempotency. (An alias and labels
// are left out when there are none, so that the hash of a request without them is
// the one it had before they existed.)
func requestHash(name string, body *StartRunBody) string {
	h := sha256.New()
	labels := body.Labels
	if len(labels) == 0 {
		labels = nil
	}
	b, _ := json.Marshal(struct {
		Name     string            `json:"name"`
		Version  int               `json:"version"`
		Alias    string            `json:"alias,omitempty"`
		Input    json.RawMessage   `json:"input"`
		Labels   map[string]string `json:"labels,omitempty"`
		Priority *int              `json:"priority,omitempty"`
		Deadline *time.Time        `json:"deadline,omitempty"`
	}{name, body.Version, body.Alias, compactJSON(body.Input), labels, body.Priority, body.Deadline})
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

func compactJSON(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return b
	}
	out, _ := json.Marshal(v)
	return out
}
