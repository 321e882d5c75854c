package api

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"

	"github.com/cairnrun/cairn/catalog"
)

// Operation is a bulk operation (POST /v1/runs:bulk) and its progress.
type Operation struct {
	ID         string          `json:"id" doc:"operation ID (UUIDv7)"`
	Action     string          `json:"action" enum:"cancel,retry,pause,resume"`
	Filter     json.RawMessage `json:"filter" doc:"the filter the runs were matched with, as the server applies it (labels as an object)"`
	Status     string          `json:"status" enum:"running,succeeded,failed,canceled" doc:"running until every matched run was processed"`
	Actor      string          `json:"actor" doc:"the name of the token that created it"`
	Total      int             `json:"total" doc:"runs the filter matched when the operation was created; runs created later are not touched"`
	Processed  int             `json:"processed" doc:"runs done so far: applied + skipped"`
	Applied    int             `json:"applied" doc:"runs the action changed"`
	Skipped    int             `json:"skipped" doc:"runs the action did not apply to (their state then); GET …/runs says why"`
	Error      json.RawMessage `json:"error" doc:"why the operation failed; null otherwise"`
	CreatedAt  time.Time       `json:"created_at"`
	UpdatedAt  time.Time       `json:"updated_at"`
	FinishedAt *time.Time      `json:"finished_at"`
}

func operationOf(op *catalog.Operation) Operation {
	return Operation{
		ID: op.ID.String(), Action: string(op.Action), Filter: jsonOrNull(op.Filter), Status: string(op.Status),
		Actor: op.Actor, Total: op.Total, Processed: op.Processed, Applied: op.Applied, Skipped: op.Skipped,
		Error: jsonOrNull(op.Error), CreatedAt: op.CreatedAt.UTC(), UpdatedAt: op.UpdatedAt.UTC(), FinishedAt: utc(op.FinishedAt),
	}
}

// OperationRun is what a bulk operation did to one run.
type OperationRun struct {
	RunID   string    `json:"run_id"`
	Outcome string    `json:"outcome" enum:"applied,skipped"`
	Detail  string    `json:"detail,omitempty" doc:"why the action did not apply"`
	At      time.Time `json:"at"`
}

// BulkBody is the body of POST /v1/runs:bulk.
type BulkBody struct {
	Action string          `json:"action" enum:"cancel,retry,pause,resume" doc:"what to do to every run the filter matches"`
	Filter RunFilterParams `json:"filter" doc:"the runs, as GET /v1/runs filters them (label: a list of key=value); an empty filter matches every run"`
}

type operationOutput struct {
	Status   int
	Location string `header:"Location"`
	Body     Operation
}

// OperationIDParam is the {id} path parameter of an operation.
type OperationIDParam struct {
	ID string `path:"id" format:"uuid" doc:"operation ID"`
}

func (p OperationIDParam) uuid() (uuid.UUID, error) {
	id, err := uuid.Parse(p.ID)
	if err != nil {
		return uuid.Nil, withDetail(errBadRequest, "the operation ID is not a UUID")
	}
	return id, nil
}

func (s *Server) registerOperations() {
	register(s, huma.Operation{
		OperationID:   "bulkRuns",
		Method:        http.MethodPost,
		Path:          "/v1/runs:bulk",
		Summary:       "Act on every run a filter matches",
		Description:   "Creates an operation that cancels, retries, pauses or resumes every run the filter matches now (runs created later are left alone), in small batches, on whichever server holds it: it survives a restart and acts exactly once per run. A run the action does not apply to (a retry of a running run) is skipped and counted. Follow it with GET /v1/operations/{id}.",
		Tags:          []string{"runs"},
		DefaultStatus: http.StatusAccepted,
	}, RoleOperator, []problemClass{classValidationFailed}, func(ctx context.Context, in *struct {
		Body BulkBody
	}) (*operationOutput, error) {
		action := catalog.OperationAction(in.Body.Action)
		if !catalog.OperationActionSupported(action) {
			return nil, &validationError{errs: []error{&huma.ErrorDetail{Location: "body.action", Value: in.Body.Action,
				Message: "this server cannot apply this action in bulk yet"}}}
		}
		filter, err := in.Body.Filter.listParams(ctx, "body.filter.")
		if err != nil {
			return nil, err
		}
		op, err := s.store.OperationCreate(ctx, &catalog.OperationCreateParams{Action: action, Filter: *filter, Actor: actor(ctx)})
		if err != nil {
			return nil, err
		}
		return &operationOutput{Status: http.StatusAccepted, Location: "/v1/operations/" + op.ID.String(), Body: operationOf(op)}, nil
	})

	register(s, huma.Operation{
		OperationID: "getOperation",
		Method:      http.MethodGet,
		Path:        "/v1/operations/{id}",
		Summary:     "Get a bulk operation",
		Description: "Its progress: total, processed (applied + skipped), status.",
		Tags:        []string{"runs"},
	}, RoleViewer, []problemClass{classBadRequest, classNotFound}, func(ctx context.Context, in *OperationIDParam) (*struct{ Body Operation }, error) {
		id, err := in.uuid()
		if err != nil {
			return nil, err
		}
		op, err := s.store.OperationGet(ctx, id)
		if err != nil {
			return nil, withDetail(err, "no operation %s", id)
		}
		return &struct{ Body Operation }{Body: operationOf(op)}, nil
	})

	register(s, huma.Operation{
		OperationID: "listOperationRuns",
		Method:      http.MethodGet,
		Path:        "/v1/operations/{id}/runs",
		Summary:     "List what a bulk operation did to each run",
		Description: "The runs processed so far, newest run first: applied, or skipped with the reason.",
		Tags:        []string{"runs"},
	}, RoleViewer, []problemClass{classBadRequest, classNotFound, classInvalidCursor}, func(ctx context.Context, in *struct {
		OperationIDParam
		PageParams
	}) (*listOutput[OperationRun], error) {
		id, err := in.uuid()
		if err != nil {
			return nil, err
		}
		var before uuid.UUID
		if err := s.decodeCursor(in.Cursor, "operation_runs", id.String(), &before); err != nil {
			return nil, err
		}
		if _, err := s.store.OperationGet(ctx, id); err != nil {
			return nil, withDetail(err, "no operation %s", id)
		}
		rows, err := s.store.OperationRuns(ctx, id, before, in.Limit+1)
		if err != nil {
			return nil, err
		}
		out := &listOutput[OperationRun]{}
		out.Body.Items = make([]OperationRun, 0, len(rows))
		for i, r := range rows {
			if i == in.Limit {
				out.Body.NextCursor = s.encodeCursor("operation_runs", id.String(), rows[i-1].RunID)
				break
			}
			out.Body.Items = append(out.Body.Items, OperationRun{RunID: r.RunID.String(), Outcome: r.Outcome, Detail: r.Detail, At: r.At.UTC()})
		}
		return out, nil
	})
}
