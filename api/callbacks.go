package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/functions"
)

// Callbacks (docs/api-endpoints.md, "Callbacks"): a function that started work
// outside Cairn answers {"$suspend": …}; its step waits until a third party POSTs
// the result to the envelope's callback_url. The URL is envelope-free: its body is
// the step's output as it is (a webhook from a payment provider can be pointed at
// it unchanged), and its token is the only credential.

// maxCallbackErrorSize bounds the body of a failing callback ({"message", "code"}).
const maxCallbackErrorSize = 64 << 10

// errorCodeCallbackFailed is a callback error's code when it gives none.
const errorCodeCallbackFailed = "callback_failed"

// callbackInput streams the body of a callback.
type callbackInput struct {
	Token       string `path:"token" maxLength:"512" doc:"the token of the envelope's callback_url"`
	Outcome     string `query:"outcome" enum:"succeeded,failed" default:"succeeded" doc:"succeeded: the body is the step's output; failed: the body is {\"message\", \"code\"?} and the step fails with it, terminally"`
	ContentType string `header:"Content-Type" doc:"application/json for a JSON output (inline when small); anything else is stored as bytes in the blob store"`
	// The body stays an unread stream until the token is known to be good and
	// its step to wait.
	streamedBody
}

// CallbackError is the body of a failing callback (?outcome=failed).
type CallbackError struct {
	Message string `json:"message" doc:"what failed (1 to 4096 characters)"`
	Code    string `json:"code,omitempty" doc:"a short machine-readable class (at most 64 characters); default callback_failed"`
}

// CallbackResult is the answer of a callback: the step it completed.
type CallbackResult struct {
	RunID    string `json:"run_id" doc:"the step's run"`
	Step     Step   `json:"step" doc:"the step now: succeeded with the output, or failed with the error (still running when buffered)"`
	Buffered bool   `json:"buffered" doc:"the callback came before the function answered {\"$suspend\": …}: it is kept, and completes the step as soon as the step suspends"`
}

func (s *Server) registerCallbacks() {
	// The body is a stream (see registerCheckpoint for why the JSON schema is set
	// after registration).
	jsonBody := &huma.MediaType{}
	register(s, huma.Operation{
		OperationID: "completeCallback",
		Method:      http.MethodPost,
		Path:        "/v1/callbacks/{token}",
		Summary:     "Complete a step waiting for a callback",
		Description: "The envelope's `callback_url`: authenticated by its token (signed by the server, naming run, step and attempt), not by an API token. " +
			"The step, suspended after its function answered `{\"$suspend\": …}`, succeeds with the body as its output, as the signal endpoint takes a payload: " +
			"a JSON body (Content-Type application/json) inline when small, any other body stored as bytes in the blob store (the output is its `$blob` reference), an empty body null. " +
			"With `?outcome=failed` the body is `{\"message\", \"code\"?}` and the step fails with it, terminally (code default callback_failed). " +
			"Bodies up to the server's CAIRN_MAX_CHECKPOINT_SIZE (default 256 MiB). " +
			"A callback that comes while the attempt still runs (before its function answered `{\"$suspend\": …}`) is kept (`buffered`, event step.callback_received) and completes the step as soon as it suspends. " +
			"A token the server did not sign is a 401 unauthorized; a token whose step no longer waits for that attempt's callback (completed already, timed out, canceled, run again, or a callback is kept already) a 409 callback_not_waiting, before the body is read, and nothing changes. " +
			"One request at a time reads a body for a step: a second one for the same step while the first is still being received is a 409 callback_not_waiting too, before its body is read.",
		Tags: []string{"runs"},
		RequestBody: &huma.RequestBody{Content: map[string]*huma.MediaType{
			"application/json":         jsonBody,
			"application/octet-stream": {Schema: &huma.Schema{Type: "string", Format: "binary"}},
		}},
	}, RoleNone, []problemClass{classBadRequest, classUnauthorized, classNotFound, classCallbackNotWaiting, classPayloadTooLarge, classRequestTimeout},
		func(ctx context.Context, in *callbackInput) (*struct{ Body CallbackResult }, error) {
			runID, key, attempt, err := functions.ParseCallbackToken(s.cfg.SigningKey, in.Token)
			if err != nil {
				return nil, withDetail(errUnauthorized, "the callback token is not valid")
			}
			// Nothing goes to the blob store for a step that no longer waits (the
			// token's signature never expires), nor for a second request while one
			// is reading its body: the request takes the step's
			// callback first, and keeps it until it has answered. The catalog checks
			// the step again when it completes it, so a race ends in the same 409.
			holder := uuid.New()
			if err := s.store.CallbackClaim(ctx, runID, key, attempt, holder, callbackClaimTTL); err != nil {
				return nil, callbackRefused(err)
			}
			defer s.keepCallbackClaim(ctx, runID, key, holder)()
			if in.contentLength > s.cfg.MaxCheckpointSize {
				return nil, withDetail(errTooLarge, "the callback's body is larger than the limit of %d bytes", s.cfg.MaxCheckpointSize)
			}
			r, err := s.callbackResolution(ctx, in)
			if err != nil {
				return nil, err
			}
			buffered, err := s.store.CallbackComplete(ctx, runID, key, attempt, r)
			if err != nil {
				return nil, callbackRefused(err)
			}
			st, err := s.store.StepGet(ctx, runID, key)
			if err != nil {
				return nil, err
			}
			return &struct{ Body CallbackResult }{Body: CallbackResult{RunID: runID.String(), Step: stepOf(st), Buffered: buffered}}, nil
		})
	jsonBody.Schema = &huma.Schema{}
}

// callbackClaimTTL is how long a callback request holds its step's callback
// without renewing it (keepCallbackClaim renews it every third of that): a server
// that died while reading a body leaves the step to the next request after it.
const callbackClaimTTL = 30 * time.Second

// keepCallbackClaim renews holder's claim on step key's callback while the request
// reads its body; the function it returns stops renewing and releases the claim
// (even when the request's context has ended).
func (s *Server) keepCallbackClaim(ctx context.Context, runID uuid.UUID, key string, holder uuid.UUID) (release func()) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(callbackClaimTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if _, err := s.store.CallbackRenew(ctx, runID, key, holder, callbackClaimTTL); err != nil && ctx.Err() == nil {
					s.logger.WarnContext(ctx, "renew a callback claim", "run_id", runID, "step", key, "request_id", RequestID(ctx), "error", err)
				}
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
		if err := s.store.CallbackRelease(context.WithoutCancel(ctx), runID, key, holder); err != nil {
			// The claim lapses after callbackClaimTTL.
			s.logger.WarnContext(ctx, "release a callback claim", "run_id", runID, "step", key, "request_id", RequestID(ctx), "error", err)
		}
	}
}

// callbackRefused names why the catalog refused a callback (the step no longer
// waits for it, or another request for it is being read) or that its step does
// not exist; other errors are returned as they are.
func callbackRefused(err error) error {
	switch {
	case errors.Is(err, catalog.ErrNotFound):
		return withDetail(err, "the callback's step does not exist (its run was deleted)")
	case errors.Is(err, catalog.ErrCallbackNotWaiting):
		if reason := catalog.Reason(err); reason != "" {
			return withDetail(err, "%s", reason)
		}
		return withDetail(err, "the step no longer waits for this callback: it was completed, timed out or canceled meanwhile")
	}
	return err
}

// callbackResolution reads the body: the output (?outcome=succeeded), or the
// error (?outcome=failed).
func (s *Server) callbackResolution(ctx context.Context, in *callbackInput) (catalog.Resolution, error) {
	if in.Outcome == string(catalog.OutcomeFailed) {
		return callbackFailure(http.MaxBytesReader(in.w, in.body, maxCallbackErrorSize))
	}
	output := json.RawMessage("null")
	if in.contentLength != 0 {
		body := http.MaxBytesReader(in.w, in.body, s.cfg.MaxCheckpointSize)
		stored, err := s.storeCheckpoint(ctx, body, in.ContentType)
		if err != nil {
			return catalog.Resolution{}, err
		}
		if !isEmptyBlob(stored) {
			output = stored
		}
	}
	return catalog.Resolution{Outcome: catalog.OutcomeSucceeded, Output: output}, nil
}

// callbackFailure reads a failing callback's {"message", "code"?}.
func callbackFailure(body io.Reader) (catalog.Resolution, error) {
	b, err := io.ReadAll(body)
	if err != nil {
		return catalog.Resolution{}, bodyError(err)
	}
	var e CallbackError
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	invalid := func(at, msg string) error {
		return &validationError{errs: []error{&huma.ErrorDetail{Location: "body" + at, Message: msg}}}
	}
	if err := dec.Decode(&e); err != nil {
		return catalog.Resolution{}, invalid("", `with ?outcome=failed the body is {"message": "…", "code": "…"}: `+err.Error())
	}
	switch {
	case e.Message == "" || len(e.Message) > 4096:
		return catalog.Resolution{}, invalid(".message", "message must be 1 to 4096 characters")
	case len(e.Code) > 64:
		return catalog.Resolution{}, invalid(".code", "code must be at most 64 characters")
	}
	if at, msg := jsonTextProblem(b); msg != "" {
		return catalog.Resolution{}, invalid(at, msg)
	}
	if e.Code == "" {
		e.Code = errorCodeCallbackFailed
	}
	data, _ := json.Marshal(functions.Error{Message: e.Message, Code: e.Code})
	return catalog.Resolution{Outcome: catalog.OutcomeFailed, Error: data}, nil
}
