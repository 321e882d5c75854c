package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"

	"github.com/danielgtaylor/huma/v2"

	"github.com/cairnrun/cairn/catalog"
)

// RetryRunBody is the body of POST /v1/runs/{id}/retry.
type RetryRunBody struct {
	Version int    `json:"version,omitempty" minimum:"0" maximum:"2147483647" doc:"move the run onto this version of its workflow first (every step it keeps must be there with the same key and needs); its own version when absent or 0"`
	Alias   string `json:"alias,omitempty" pattern:"^[a-z][a-z0-9-]*$" maxLength:"63" doc:"move the run onto the version this alias of its workflow names now, as version would. Not with version"`
}

// RerunRunBody is the body of POST /v1/runs/{id}/rerun.
type RerunRunBody struct {
	FromStep string          `json:"from_step" pattern:"^[a-z0-9][a-z0-9_-]*$" maxLength:"63" doc:"the step to run again: it and every step downstream of it run fresh"`
	Input    json.RawMessage `json:"input,omitempty" doc:"the new run's input, any JSON value; the source run's when absent"`
	Version  int             `json:"version,omitempty" minimum:"0" maximum:"2147483647" doc:"the version to run; the source run's when absent or 0. Every step reused must be there with the same needs"`
	Alias    string          `json:"alias,omitempty" pattern:"^[a-z][a-z0-9-]*$" maxLength:"63" doc:"run on the version this alias of the workflow names now, as version would. Not with version"`
	DryRun   bool            `json:"dry_run,omitempty" doc:"only answer the plan (200); nothing is created"`
}

// RerunPlan says which steps of a rerun reuse the source run's outputs and which
// run, each in the definition's order.
type RerunPlan struct {
	Reused []string `json:"reused" doc:"steps carried over from the source run: succeeded, with its output as stored (same inline value or same $blob reference), without an attempt"`
	Run    []string `json:"run" doc:"steps that run: from_step, everything downstream of it, and steps that did not succeed in the source run"`
}

// RerunResult is the answer of POST /v1/runs/{id}/rerun.
type RerunResult struct {
	Run  *Run      `json:"run,omitempty" doc:"the new run; absent on a dry run"`
	Plan RerunPlan `json:"plan"`
}

type rerunOutput struct {
	Status   int
	Location string `header:"Location" doc:"the new run (absent on a dry run)"`
	Body     RerunResult
}

// TriedStep is a step of an earlier try of a run, as it was when a retry replaced
// it.
type TriedStep struct {
	Try  int  `json:"try" minimum:"1" doc:"the try it belonged to: 1 for the run's first, 2 after one retry, …"`
	Step Step `json:"step" doc:"the step as it was then, as GET /v1/runs/{id}/steps shows a step"`
}

func (s *Server) registerRetry() {
	register(s, huma.Operation{
		OperationID: "listStepHistory",
		Method:      http.MethodGet,
		Path:        "/v1/runs/{id}/step-history",
		Summary:     "List the steps of a run's earlier tries",
		Description: "The steps that retries of the run replaced, each as it was then (step), with the try it belonged to (1 for the run's first, 2 after one retry, …), by try: the failed, canceled and skipped steps a retry ran again, and the failure handlers (compensate-… and on_failure steps) that the failure had run. A step a retry kept (it succeeded) is listed by GET /v1/runs/{id}/steps only; a map's instances by GET …/items. Empty for a run never retried. The events of every try stay in GET /v1/runs/{id}/events.",
		Tags:        []string{"runs"},
	}, RoleViewer, []problemClass{classBadRequest, classNotFound}, func(ctx context.Context, in *RunIDParam) (*itemsOutput[TriedStep], error) {
		id, err := in.uuid()
		if err != nil {
			return nil, err
		}
		rows, err := s.store.StepHistory(ctx, id)
		if err != nil {
			return nil, err
		}
		if len(rows) == 0 {
			if _, err := s.store.RunGet(ctx, id); err != nil {
				return nil, err
			}
		}
		return itemsOf(rows, func(st *catalog.TriedStep) TriedStep { return TriedStep{Try: st.Try, Step: stepOf(&st.Step)} }), nil
	})

	register(s, huma.Operation{
		OperationID: "retryRun",
		Method:      http.MethodPost,
		Path:        "/v1/runs/{id}/retry",
		Summary:     "Retry a run in place",
		Description: "A failed or canceled run runs again: its failed, canceled and skipped steps become ready (or waiting for their needs) with a fresh attempt budget, keeping their checkpoint and attempt history; succeeded steps and their outputs are kept and never run again. With `version`, the run first moves onto that version of its workflow, which must have every kept step with the same key and needs (else 409 incompatible_version naming them). Retrying a run in any other state is a 409 invalid_run_state; of concurrent retries exactly one takes effect. One event run.retried names the actor. With an Idempotency-Key, the same request answers the run without retrying it again.",
		Tags:        []string{"runs"},
	}, RoleOperator, []problemClass{classBadRequest, classNotFound, classIdempotencyReused, classInvalidRunState, classIncompatibleVersion},
		func(ctx context.Context, in *struct {
			RunIDParam
			IdempotencyKey string `header:"Idempotency-Key" maxLength:"255" doc:"makes the request safe to retry"`
			Body           *RetryRunBody
		}) (*runOutput, error) {
			id, err := in.uuid()
			if err != nil {
				return nil, err
			}
			var body RetryRunBody
			if in.Body != nil {
				body = *in.Body
			}
			if err := versionOrAlias(body.Version, body.Alias); err != nil {
				return nil, err
			}
			p := &catalog.RunRetryParams{RunID: id, Version: body.Version, Alias: body.Alias, Actor: actor(ctx)}
			if in.IdempotencyKey != "" {
				p.IdempotencyKey = in.IdempotencyKey
				p.RequestHash = hashRequest(body)
			}
			run, _, err := s.store.RunRetry(ctx, p)
			if err != nil {
				return nil, catalogDetail(err)
			}
			return &runOutput{Body: runOf(run)}, nil
		})

	rerun := huma.Operation{
		OperationID:   "rerunRun",
		Method:        http.MethodPost,
		Path:          "/v1/runs/{id}/rerun",
		Summary:       "Rerun a run from a step",
		Description:   "Starts a new run (rerun_of the source) of the source run's workflow, on its version unless `version` is given. Every step not downstream of `from_step` (neither it nor a transitive dependent of it) that succeeded in the source is carried over by reference: succeeded, with the source's output as stored (the same inline value or $blob reference; nothing copied, no attempt). `from_step`, its descendants, and steps that did not succeed run fresh, with `input` (else the source's). The source must have ended (else 409 invalid_run_state). A step to reuse that has other needs in `version` is a 409 incompatible_version; an unknown `from_step` a 422 naming it. Answers 202 with the run and the plan, or with `dry_run` 200 with the plan only. With an Idempotency-Key, the same request returns the first rerun.",
		Tags:          []string{"runs"},
		DefaultStatus: http.StatusAccepted,
		MaxBodyBytes:  maxInputSize + 1024,
	}
	rerun.Responses = map[string]*huma.Response{
		"200": {
			Description: "The plan of a dry run; nothing was created.",
			Content: map[string]*huma.MediaType{"application/json": {
				Schema: s.api.OpenAPI().Components.Schemas.Schema(reflect.TypeFor[RerunResult](), true, "RerunResult"),
			}},
		},
	}
	register(s, rerun, RoleOperator, []problemClass{classBadRequest, classNotFound, classIdempotencyReused, classInvalidRunState, classIncompatibleVersion,
		classQuotaExceeded},
		func(ctx context.Context, in *struct {
			RunIDParam
			IdempotencyKey string `header:"Idempotency-Key" maxLength:"255" doc:"makes the request safe to retry"`
			Body           RerunRunBody
		}) (*rerunOutput, error) {
			id, err := in.uuid()
			if err != nil {
				return nil, err
			}
			body := in.Body
			if err := versionOrAlias(body.Version, body.Alias); err != nil {
				return nil, err
			}
			p := &catalog.RunRerunParams{Source: id, FromStep: body.FromStep, Input: body.Input, Version: body.Version,
				Alias: body.Alias, Actor: actor(ctx), DryRun: body.DryRun}
			if in.IdempotencyKey != "" {
				p.IdempotencyKey = in.IdempotencyKey
				p.RequestHash = hashRequest(struct {
					FromStep string          `json:"from_step"`
					Input    json.RawMessage `json:"input"`
					Version  int             `json:"version"`
					Alias    string          `json:"alias,omitempty"`
				}{body.FromStep, compactJSON(body.Input), body.Version, body.Alias})
			}
			run, plan, _, err := s.store.RunRerun(ctx, p)
			if errors.Is(err, catalog.ErrInvalidInput) && catalog.Reason(err) != "" {
				// The one argument the catalog checks against the version: from_step.
				return nil, &validationError{errs: []error{&huma.ErrorDetail{
					Location: "body.from_step", Message: catalog.Reason(err), Value: body.FromStep}}}
			}
			if err != nil {
				return nil, catalogDetail(err)
			}
			out := &rerunOutput{Status: http.StatusOK, Body: RerunResult{Plan: RerunPlan{Reused: plan.Reused, Run: plan.Run}}}
			if run != nil {
				r := runOf(run)
				out.Status, out.Location, out.Body.Run = http.StatusAccepted, "/v1/runs/"+r.ID, &r
			}
			return out, nil
		})
}

// catalogDetail gives a catalog error the reason its function raised (naming the
// run, version, steps or state at fault) as the client's detail.
func catalogDetail(err error) error {
	if reason := catalog.Reason(err); reason != "" {
		return withDetail(err, "%s", reason)
	}
	return err
}

// hashRequest identifies a request's body for idempotency.
func hashRequest(v any) string {
	b, _ := json.Marshal(v)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
