package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/functions"
)

// CallbackBody is the body of POST /v1/callbacks/{token}: the result of work a
// function started and answered {"$suspend": …} for. Exactly one of output and
// error.
type CallbackBody struct {
	Output json.RawMessage `json:"output,omitempty" doc:"the step's output, any JSON value: the step succeeds with it"`
	Error  *CallbackError  `json:"error,omitempty" doc:"the step fails with it, terminally (the attempt that started the work has ended: there is none to retry)"`
}

// CallbackError is a callback's failure.
type CallbackError struct {
	Message   string `json:"message" minLength:"1" maxLength:"4096" doc:"what failed"`
	Code      string `json:"code,omitempty" maxLength:"64" doc:"a short machine-readable class; default callback_failed"`
	Retryable bool   `json:"retryable,omitempty" doc:"recorded with the error; the step fails terminally all the same"`
}

// CallbackResult is the answer of a callback: the step it completed.
type CallbackResult struct {
	RunID string `json:"run_id"`
	Step  Step   `json:"step"`
}

// errorCodeCallbackFailed is a callback error's code when it gives none.
const errorCodeCallbackFailed = "callback_failed"

func (s *Server) registerCallbacks() {
	register(s, huma.Operation{
		OperationID:  "completeCallback",
		Method:       http.MethodPost,
		Path:         "/v1/callbacks/{token}",
		Summary:      "Complete a step waiting for a callback",
		Description:  "The envelope's `callback_url`: authenticated by its token (signed by the server, naming run, step and attempt), not by an API token. The step, suspended after its function answered `{\"$suspend\": …}`, succeeds with `output` or fails, terminally, with `error`. A token the server did not sign is a 401; a token whose step no longer waits for that attempt's callback (completed already, timed out, canceled) a 409 invalid_run_state, and nothing changes.",
		Tags:         []string{"runs"},
		MaxBodyBytes: maxInputSize,
	}, RoleNone, []problemClass{classBadRequest, classUnauthorized, classNotFound, classInvalidRunState, classPayloadTooLarge, classRequestTimeout},
		func(ctx context.Context, in *struct {
			Token string `path:"token" maxLength:"512" doc:"the token of the envelope's callback_url"`
			Body  CallbackBody
		}) (*struct{ Body CallbackResult }, error) {
			runID, key, attempt, err := functions.ParseCallbackToken(s.cfg.SigningKey, in.Token)
			if err != nil {
				return nil, withDetail(errUnauthorized, "the callback token is not valid")
			}
			b := in.Body
			hasOutput := len(b.Output) > 0
			if hasOutput == (b.Error != nil) {
				return nil, &validationError{errs: []error{&huma.ErrorDetail{Location: "body",
					Message: "give exactly one of output and error"}}}
			}
			r := catalog.Resolution{Outcome: catalog.OutcomeSucceeded, Output: b.Output}
			if b.Error != nil {
				e := *b.Error
				if e.Code == "" {
					e.Code = errorCodeCallbackFailed
				}
				r = catalog.Resolution{Outcome: catalog.OutcomeFailed}
				r.Error, _ = json.Marshal(e)
			}
			if err := s.store.CallbackComplete(ctx, runID, key, attempt, r); err != nil {
				if errors.Is(err, catalog.ErrNotFound) {
					return nil, withDetail(err, "the callback's step does not exist (its run was deleted)")
				}
				return nil, catalogDetail(err)
			}
			st, err := s.store.StepGet(ctx, runID, key)
			if err != nil {
				return nil, err
			}
			return &struct{ Body CallbackResult }{Body: CallbackResult{RunID: runID.String(), Step: stepOf(st)}}, nil
		})
}
