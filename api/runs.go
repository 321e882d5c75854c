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
)

// Run is a run of a pinned workflow version.
type Run struct {
	ID           string          `json:"id" doc:"run ID (UUIDv7)"`
	Workflow     string          `json:"workflow"`
	Version      int             `json:"version" doc:"the version the run is pinned to"`
	Status       string          `json:"status" enum:"pending,running,succeeded,failed,canceled"`
	Input        json.RawMessage `json:"input" doc:"the run's input. In a list (GET /v1/runs), null when over 4 KiB: see input_omitted"`
	InputOmitted bool            `json:"input_omitted,omitempty" doc:"only in a list: true when the input is over 4 KiB (as JSON text, or as stored) and left out (input is null); GET /v1/runs/{id} has it whole"`
	Error        json.RawMessage `json:"error" doc:"why the run failed or was canceled; null otherwise"`
	Revision     int64           `json:"revision" doc:"increments on every committed change; equals the seq of the run's newest event"`
	StepsTotal   int             `json:"steps_total"`
	StepsLeft    int             `json:"steps_remaining" doc:"steps not yet in a terminal state"`
	CreatedAt    time.Time       `json:"created_at"`
	StartedAt    *time.Time      `json:"started_at" doc:"when the first step started"`
	FinishedAt   *time.Time      `json:"finished_at"`
}

func runOf(r *catalog.Run) Run {
	return Run{
		ID: r.ID.String(), Workflow: r.Workflow, Version: r.Version, Status: string(r.Status),
		Input: jsonOrNull(r.Input), InputOmitted: r.InputOmitted, Error: jsonOrNull(r.Error), Revision: r.Revision,
		StepsTotal: r.StepsTotal, StepsLeft: r.StepsRemaining, CreatedAt: r.CreatedAt.UTC(),
		StartedAt: utc(r.StartedAt), FinishedAt: utc(r.FinishedAt),
	}
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
	Version int             `json:"version,omitempty" minimum:"0" maximum:"2147483647" doc:"version to run; when absent or 0, the version alias names"`
	Alias   string          `json:"alias,omitempty" pattern:"^[a-z][a-z0-9-]{0,62}$" doc:"alias whose version to run (latest when absent), resolved when the run is created: the run keeps that version when the alias moves. Not with version"`
	Input   json.RawMessage `json:"input,omitempty" doc:"the run's input, any JSON value"`
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

// maxInputSize bounds a run's input; large data belongs in the blob store, passed
// by reference.
const maxInputSize = 1 << 20

// maxListedInput is the largest input, in bytes (as JSON text and as stored), that
// a list of runs carries: a page of the largest size (1,000) then holds at most
// 4 MiB of inputs (security audit 1, D8: a page of runs with 1 MiB inputs made
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
	}, RoleOperator, []problemClass{classNotFound, classIdempotencyReused}, func(ctx context.Context, in *struct {
		WorkflowNameParam
		IdempotencyKey string `header:"Idempotency-Key" maxLength:"255" doc:"makes the request safe to retry"`
		Body           *StartRunBody
	}) (*startRunOutput, error) {
		var body StartRunBody
		if in.Body != nil {
			body = *in.Body
		}
		if body.Version > 0 && body.Alias != "" {
			return nil, &validationError{errs: []error{&huma.ErrorDetail{Location: "body.alias",
				Message: "give a version or an alias, not both", Value: body.Alias}}}
		}
		// One statement resolves the version (given, or the one the alias names:
		// latest unless given) and creates the run from the steps the version
		// recorded at upload.
		p := &catalog.RunCreateParams{Workflow: in.Name, Version: body.Version, Alias: body.Alias, Input: body.Input}
		if in.IdempotencyKey != "" {
			p.IdempotencyScope = "start_run:" + in.Name
			p.IdempotencyKey = in.IdempotencyKey
			p.RequestHash = requestHash(in.Name, body.Version, body.Alias, body.Input)
		}
		run, _, err := s.store.RunCreate(ctx, p)
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
		Description: "Runs newest first, optionally filtered; a cursor only works with the filters it was issued for. An input over 4 KiB (as JSON text, or as stored) is left out of its item (input null, input_omitted true), so that a page stays small: GET /v1/runs/{id} has it.",
		Tags:        []string{"runs"},
	}, RoleViewer, []problemClass{classInvalidCursor}, func(ctx context.Context, in *struct {
		Workflow string `query:"workflow" pattern:"^[a-z0-9][a-z0-9-]{0,62}$" doc:"only runs of this workflow"`
		Status   string `query:"status" enum:"pending,running,succeeded,failed,canceled" doc:"only runs in this state"`
		PageParams
	}) (*listOutput[Run], error) {
		filter := in.Workflow + "\x00" + in.Status
		var before uuid.UUID
		if err := s.decodeCursor(in.Cursor, "runs", filter, &before); err != nil {
			return nil, err
		}
		rows, err := s.store.RunList(ctx, &catalog.RunListParams{Workflow: in.Workflow, Status: in.Status, Before: before, Limit: in.Limit + 1, MaxInput: maxListedInput})
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

// requestHash identifies a start-run request for idempotency.
func requestHash(name string, version int, alias string, input json.RawMessage) string {
	h := sha256.New()
	b, _ := json.Marshal(struct {
		Name    string          `json:"name"`
		Version int             `json:"version"`
		Alias   string          `json:"alias,omitempty"` // omitted: the hashes of requests without one stay as they were
		Input   json.RawMessage `json:"input"`
	}{name, version, alias, compactJSON(input)})
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
