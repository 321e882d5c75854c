package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/expr"
	"github.com/cairnrun/cairn/namespace"
)

// maxEventID is the longest event id kept as it is (received_events.id); a
// longer one is kept as its SHA-256.
const maxEventID = 200

// emitHook answers a delivery of a hook with emit (docs/webhooks.md): it
// receives the event the hook names, with the data of emit.data, as POST
// /v1/events does, under the id of emit.id, else of the delivery's idempotency
// key (hook:<workflow>:<hook>:<key>), else a new one. A delivery whose event
// id came before answers that event (replay), whatever its body, as a hook that
// starts runs answers the first run. field names a field of the hook in the
// manifest, for the 422 of an expression that fails.
func (s *Server) emitHook(ctx context.Context, in *hookInput, version int, hook *bundle.Hook, vars expr.Vars, field func(string) string) (*hookOutput, error) {
	start := time.Now()
	data, err := evalHook(ctx, hook.Emit.Data, vars, field("emit.data"), func(p *expr.Program) (json.RawMessage, error) { return p.Eval(ctx, vars) })
	if err != nil {
		return nil, err
	}
	if at, msg := jsonTextProblem(data); msg != "" {
		return nil, &validationError{errs: []error{&huma.ErrorDetail{Location: field("emit.data"), Message: "the data" + at + " " + msg}}}
	}
	var id string
	if hook.Emit.ID != "" {
		id, err = evalHook(ctx, hook.Emit.ID, vars, field("emit.id"), func(p *expr.Program) (string, error) { return p.EvalString(ctx, vars) })
		if err != nil {
			return nil, err
		}
		if id == "" {
			return nil, &validationError{errs: []error{&huma.ErrorDetail{Location: field("emit.id"), Message: "the event's id is empty"}}}
		}
	} else {
		key, err := hookIdempotencyKey(ctx, hook, vars, in.headers, field("idempotency_key"))
		if err != nil {
			return nil, err
		}
		if key != "" {
			id = "hook:" + namespace.Strip(in.Workflow) + ":" + hook.Name + ":" + key
		}
	}
	id = storableKey(id, maxEventID)
	// The definition's event name is qualified already (bundle.Definition.Qualify):
	// receiveEvent qualifies the name it is given.
	ev, replay, err := s.receiveEvent(ctx, start, &catalog.EventIngestParams{ID: id, Name: namespace.Strip(hook.Emit.Event), Data: data,
		Actor: "hook:" + namespace.Strip(in.Workflow) + "/" + hook.Name})
	if errors.Is(err, catalog.ErrIdempotencyMismatch) {
		// The sender's retry of the event, with a body that differs (a new
		// timestamp): the first delivery's event is the answer.
		ev, err = s.store.ReceivedEventGet(ctx, qualify(ctx, id))
		replay = true
	}
	if err != nil {
		return nil, fmt.Errorf("hook %s of %s: %w", hook.Name, in.Workflow, err)
	}
	if replay {
		s.metrics.hookDelivery("replay")
	} else {
		s.metrics.hookDelivery("emitted")
	}
	answer := eventAnswerOf(ev, replay)
	return &hookOutput{Status: http.StatusAccepted, Location: "/v1/events/" + url.PathEscape(eventIDOf(ev)), Body: HookDelivery{
		Workflow: namespace.Strip(in.Workflow), Version: version, Replay: replay, Event: &answer,
	}}, nil
}
