package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"

	"github.com/danielgtaylor/huma/v2"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/catalog"
)

// signalInput streams the body of a signal.
type signalInput struct {
	RunIDParam
	Name           string `path:"name" pattern:"^[a-z0-9][a-z0-9_.-]*$" maxLength:"63" doc:"the signal's name, as a signal step of the run's version names it"`
	ContentType    string `header:"Content-Type" doc:"application/json for a JSON payload (stored inline when small); anything else is stored as bytes in the blob store"`
	IdempotencyKey string `header:"Idempotency-Key" maxLength:"255" doc:"a repeat with the same key and payload (same run and name) is the same signal, applied once; the same key with another payload is a 409 idempotency_key_reused"`
	streamedBody
}

// SignalResult is what became of a signal.
type SignalResult struct {
	Seq       int64  `json:"seq" doc:"the signal's place in the order signals were received"`
	Step      string `json:"step,omitempty" doc:"the step it completed; absent while it is buffered for the next signal step of its name"`
	Buffered  bool   `json:"buffered" doc:"no step of the run waits for it yet: the next signal step of its name takes it (oldest first)"`
	Duplicate bool   `json:"duplicate" doc:"the Idempotency-Key was used before: nothing was applied again; seq and step are the first delivery's"`
}

func (s *Server) registerSignals() {
	// The body is a stream (see registerCheckpoint for why the JSON schema is set
	// after registration).
	jsonBody := &huma.MediaType{}
	register(s, huma.Operation{
		OperationID: "sendSignal",
		Method:      http.MethodPost,
		Path:        "/v1/runs/{id}/signals/{name}",
		Summary:     "Send a signal to a run",
		Description: "Delivers a payload to the run's signal step of that name (`signal: {name}` in cairn.yaml): the step waiting for it succeeds with the payload as its output. A signal sent before any step waits for it is buffered, in order: the next signal step of that name takes the oldest. A JSON body (Content-Type application/json) is the payload, inline when small; any other body is stored as bytes in the blob store and the payload is its `$blob` reference; an empty body is null. Bodies up to the server's CAIRN_MAX_CHECKPOINT_SIZE (default 256 MiB). With an Idempotency-Key, a repeat with the same payload is applied once (the answer says duplicate); the same key with another payload is a 409 idempotency_key_reused and nothing is applied. A run that has finished is a 409 run_finished; a name no signal step of the run's version has is a 404. The event signal.received names the actor.",
		Tags:        []string{"runs"},
		RequestBody: &huma.RequestBody{Content: map[string]*huma.MediaType{
			"application/json":         jsonBody,
			"application/octet-stream": {Schema: &huma.Schema{Type: "string", Format: "binary"}},
		}},
	}, RoleOperator, []problemClass{classBadRequest, classNotFound, classIdempotencyReused, classRunFinished, classPayloadTooLarge, classRequestTimeout},
		func(ctx context.Context, in *signalInput) (*struct{ Body SignalResult }, error) {
			id, err := in.uuid()
			if err != nil {
				return nil, err
			}
			run, err := s.store.RunGet(ctx, id)
			if err != nil {
				return nil, err
			}
			// A repeat of a key is answered even after the run has ended (a client
			// whose first answer was lost): cairn_signal_send looks the key up first.
			if run.Status.Terminal() && in.IdempotencyKey == "" {
				return nil, withDetail(catalog.ErrRunFinished, "run %s has finished (%s): it takes no more signals", id, run.Status)
			}
			if err := s.signalKnown(ctx, run, in.Name); err != nil {
				return nil, err
			}
			if in.contentLength > s.cfg.MaxCheckpointSize {
				return nil, withDetail(errTooLarge, "the signal is larger than the limit of %d bytes", s.cfg.MaxCheckpointSize)
			}
			payload := json.RawMessage("null")
			if in.contentLength != 0 {
				body := http.MaxBytesReader(in.w, in.body, s.cfg.MaxCheckpointSize)
				stored, err := s.storeCheckpoint(ctx, body, in.ContentType)
				if err != nil {
					return nil, err
				}
				if !isEmptyBlob(stored) {
					payload = stored
				}
			}
			res, err := s.store.SignalSend(ctx, &catalog.Signal{RunID: id, Name: in.Name, Payload: payload,
				IdempotencyKey: in.IdempotencyKey, Actor: actor(ctx)})
			if errors.Is(err, catalog.ErrIdempotencyMismatch) {
				return nil, withDetail(err, "Idempotency-Key %q was used for a %s signal to this run with another payload: nothing was applied; send a new key for a new signal",
					in.IdempotencyKey, in.Name)
			}
			if err != nil {
				return nil, err
			}
			out := &struct{ Body SignalResult }{Body: SignalResult{Seq: res.Seq, Duplicate: res.Duplicate, Buffered: res.Step == nil}}
			if res.Step != nil {
				out.Body.Step = *res.Step
			}
			return out, nil
		})
	jsonBody.Schema = &huma.Schema{}
}

// signalKnown checks that a signal step of the run's version waits for name: a
// 404 otherwise.
func (s *Server) signalKnown(ctx context.Context, run *catalog.Run, name string) error {
	v, err := s.store.VersionGet(ctx, run.Workflow, run.Version)
	if err != nil {
		return err
	}
	def, err := bundle.ParseDefinition(v.Definition)
	if err != nil {
		return err
	}
	if !slices.Contains(def.SignalNames(), name) {
		return withDetail(errNotFound, "no signal step of version %d of %s waits for a signal %q", run.Version, run.Workflow, name)
	}
	return nil
}

// isEmptyBlob reports whether a stored payload is a reference to zero bytes (a body
// of unknown length that was empty): the payload is then null.
func isEmptyBlob(stored json.RawMessage) bool {
	ref, ok := blobstore.ParseRef(stored)
	return ok && ref.Size == 0
}
