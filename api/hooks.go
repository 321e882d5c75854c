package api

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/danielgtaylor/huma/v2"

	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/expr"
	"github.com/cairnrun/cairn/namespace"
)

// The headers a webhook delivery is signed in, one per signature style.
const (
	headerCairnSignature  = "X-Cairn-Signature"
	headerGitHubSignature = "X-Hub-Signature-256"
	headerStripeSignature = "Stripe-Signature"
	// headerGitHubDelivery is the GUID GitHub gives each delivery (kept on a
	// redelivery): the idempotency key of a github hook that sets none.
	headerGitHubDelivery = "X-GitHub-Delivery"
)

// maxHookBody bounds a delivery's body, as a run's input is bounded.
const maxHookBody = maxInputSize

// stripeTolerance is how far a Stripe signature's timestamp may be from now.
const stripeTolerance = 5 * time.Minute

// maxHookKey is the longest idempotency key kept as it is; a longer one is kept as
// its SHA-256 (the catalog's keys are at most 255 bytes).
const maxHookKey = 255

// hookInput is a delivery: its raw body (Huma reads it whole, up to MaxBodyBytes,
// else 413) and its headers.
type hookInput struct {
	Workflow string `path:"workflow" pattern:"^[a-z0-9][a-z0-9-]*$" maxLength:"63" doc:"workflow name"`
	Hook     string `path:"hook" pattern:"^[a-z0-9][a-z0-9_-]*$" maxLength:"63" doc:"hook name, as in the manifest's hooks:"`
	// Namespace is read by enterNamespace (api/namespace.go); declared here for the
	// OpenAPI document.
	Namespace string `query:"namespace" maxLength:"31" doc:"the workflow's namespace, for a sender that cannot set the Cairn-Namespace header; default: the header's, else default"`
	RawBody   []byte

	headers http.Header
}

// Resolve implements huma.Resolver: it keeps the request's headers, for the
// signature and the expressions.
func (h *hookInput) Resolve(ctx huma.Context) []error {
	h.headers = http.Header{}
	ctx.EachHeader(func(name, value string) { h.headers.Add(name, value) })
	return nil
}

// HookDelivery is the answer to a webhook delivery.
type HookDelivery struct {
	RunID    string `json:"run_id,omitempty" format:"uuid" doc:"the run the delivery started, or (a replay) the run the first delivery with its idempotency key started; absent for a hook that emits an event"`
	Workflow string `json:"workflow"`
	Version  int    `json:"version" doc:"the version the run is pinned to, or whose hook emitted the event"`
	Replay   bool   `json:"replay" doc:"true when a delivery with the same idempotency key (or, for a hook that emits an event, the same event id) came before: nothing new was started or done"`
	// Event is what a hook with emit sent.
	Event *EventAnswer `json:"event,omitempty" doc:"the event a hook with emit sent and what it did, as POST /v1/events answers"`
}

type hookOutput struct {
	Status   int
	Location string `header:"Location"`
	Body     HookDelivery
}

func (s *Server) registerHooks() {
	// Huma marks a RawBody as required, and answers a request without a body 400
	// before any handler runs: a delivery without a signature must be a 401. And
	// it validates (parses) a body whose JSON media type has a schema: a delivery
	// is verified on its raw bytes, whatever they are. So the body is made
	// optional, and the JSON media type given its schema, once registered (Huma
	// reads both flags then, at registration, and per request the Required one),
	// as registerCheckpoint does.
	jsonBody := &huma.MediaType{}
	body := &huma.RequestBody{
		Description: "the delivery's payload as its sender signed it: JSON, or any text (seen as a string)",
		Content:     map[string]*huma.MediaType{"application/json": jsonBody},
	}
	defer func() { body.Required, jsonBody.Schema = false, &huma.Schema{} }()
	register(s, huma.Operation{
		RequestBody:   body,
		OperationID:   "deliverHook",
		Method:        http.MethodPost,
		Path:          "/v1/hooks/{workflow}/{hook}",
		Summary:       "Start a run, or send an event, from a signed webhook delivery",
		Description:   "Authenticated by the delivery's signature, not by a token: the hook (hooks: in the manifest of the version the workflow's latest alias names) says which secret and which style (hmac-sha256: X-Cairn-Signature: sha256=<hex>; github: X-Hub-Signature-256: sha256=<hex>; stripe: Stripe-Signature: t=…,v1=…, within 5 minutes). A missing or bad signature is a 401 and starts nothing. A hook with emit sends an event instead of starting a run (its data and id from emit.data and emit.id, else the delivery's idempotency key), received as POST /v1/events receives one; the answer's event says what it did (docs/events.md). The hook's input expression maps the body (JSON; any other body is seen as a string) and headers to the run's input; its idempotency_key expression names the delivery, so that a replay answers the run the first delivery started (a github hook without one is keyed by X-GitHub-Delivery; an hmac-sha256 hook without one starts a run for every delivery, replays included). An input holding text the catalog cannot store (a \\u0000) is a 422 naming the hook's input. The body is at most 1 MiB. Answers 202 with the run's ID.",
		Tags:          []string{"hooks"},
		DefaultStatus: http.StatusAccepted,
		MaxBodyBytes:  maxHookBody,
	}, RoleNone, []problemClass{classUnauthorized, classNotFound, classNoSecretKey, classPayloadTooLarge, classUnsupportedMediaType,
		classQuotaExceeded}, func(ctx context.Context, in *hookInput) (*hookOutput, error) {
		// Before anything is looked up: a request without any signature is not a
		// delivery, and learns nothing of the workflows.
		if in.headers.Get(headerCairnSignature) == "" && in.headers.Get(headerGitHubSignature) == "" && in.headers.Get(headerStripeSignature) == "" {
			s.metrics.hookDelivery("refused")
			return nil, withDetail(errUnauthorized, "a webhook delivery must be signed (%s, %s or %s)", headerCairnSignature, headerGitHubSignature, headerStripeSignature)
		}
		if !s.vault.Configured() {
			return nil, s.vaultError(nil)
		}
		in.Workflow = qualify(ctx, in.Workflow) // the namespace: Cairn-Namespace or ?namespace=
		v, err := s.store.VersionGet(ctx, in.Workflow, 0)
		if err != nil {
			return nil, withDetail(err, "no workflow %q with a latest version", in.Workflow)
		}
		var def bundle.Definition
		if err := json.Unmarshal(v.Definition, &def); err != nil {
			return nil, fmt.Errorf("definition of %s v%d: %w", in.Workflow, v.Version, err)
		}
		hook := def.Hook(in.Hook)
		if hook == nil {
			return nil, withDetail(errNotFound, "workflow %q (version %d, its latest) has no hook %q", in.Workflow, v.Version, in.Hook)
		}
		secret, _, err := s.vault.Reveal(ctx, hook.Secret)
		switch {
		case errors.Is(err, catalog.ErrNotFound):
			s.logger.WarnContext(ctx, "webhook delivery for a hook whose secret is not set", "workflow", in.Workflow, "hook", in.Hook, "secret", hook.Secret)
			s.metrics.hookDelivery("refused")
			return nil, withDetail(errUnauthorized, "the hook's secret is not set: the delivery cannot be verified")
		case err != nil:
			return nil, s.vaultError(err)
		}
		if err := verifySignature(hook.Signature, secret, in.RawBody, in.headers, time.Now()); err != nil {
			s.logger.InfoContext(ctx, "webhook signature refused", "workflow", in.Workflow, "hook", in.Hook, "request_id", RequestID(ctx), "error", err)
			s.metrics.hookDelivery("refused")
			return nil, withDetail(errUnauthorized, "%s", err.Error())
		}

		vars, err := hookVars(in.RawBody, in.headers)
		if err != nil {
			return nil, err
		}
		field := func(name string) string {
			for i := range def.Hooks {
				if def.Hooks[i].Name == hook.Name {
					return fmt.Sprintf("%s#hooks[%d].%s", bundle.ManifestPath, i, name)
				}
			}
			return name
		}
		if hook.Emit != nil {
			return s.emitHook(ctx, in, v.Version, hook, vars, field)
		}
		input, err := evalHook(ctx, hook.Input, vars, field("input"), func(p *expr.Program) (json.RawMessage, error) { return p.Eval(ctx, vars) })
		if err != nil {
			return nil, err
		}
		if len(input) > maxInputSize {
			return nil, &validationError{errs: []error{&huma.ErrorDetail{Location: field("input"), Message: fmt.Sprintf("the input is %d bytes, over the limit of %d", len(input), maxInputSize)}}}
		}
		// Text the catalog cannot store (a \u0000 in the body's strings) is the
		// delivery's fault, said as such, not the database's refusal.
		if at, msg := jsonTextProblem(input); msg != "" {
			return nil, &validationError{errs: []error{&huma.ErrorDetail{Location: field("input"), Message: "the input" + at + " " + msg}}}
		}
		p := &catalog.RunCreateParams{Workflow: in.Workflow, Version: v.Version, Input: input, Labels: catalog.Labels{"hook": hook.Name}}
		key, err := hookIdempotencyKey(ctx, hook, vars, in.headers, field("idempotency_key"))
		if err != nil {
			return nil, err
		}
		if key != "" {
			// Every delivery with the key answers the first run, whatever its body:
			// a sender retries the same event, and a 409 would only make it retry
			// again.
			p.IdempotencyScope, p.IdempotencyKey, p.RequestHash = "hook:"+in.Workflow+":"+hook.Name, key, "hook"
		}
		run, created, err := s.store.RunCreate(ctx, p)
		if errors.Is(err, catalog.ErrNotFound) {
			return nil, withDetail(err, "workflow %q version %d is gone", in.Workflow, v.Version)
		}
		if err != nil {
			return nil, err
		}
		if created {
			s.metrics.hookDelivery("started")
		} else {
			s.metrics.hookDelivery("replay")
		}
		return &hookOutput{Status: http.StatusAccepted, Location: "/v1/runs/" + run.ID.String(), Body: HookDelivery{
			RunID: run.ID.String(), Workflow: namespace.Strip(run.Workflow), Version: run.Version, Replay: !created,
		}}, nil
	})
}

// hookIdempotencyKey is the key that names a delivery: the value of the hook's
// idempotency_key expression; for a github hook without one, GitHub's delivery ID
// (X-GitHub-Delivery, the same on a redelivery); "" for none (every
// delivery starts a run). A key too long for the catalog, or whose text it cannot
// store, is kept as its SHA-256. An expression that fails or gives "" is a 422
// naming field.
func hookIdempotencyKey(ctx context.Context, hook *bundle.Hook, vars expr.Vars, headers http.Header, field string) (string, error) {
	var key string
	switch {
	case hook.IdempotencyKey != "":
		var err error
		key, err = evalHook(ctx, hook.IdempotencyKey, vars, field, func(p *expr.Program) (string, error) { return p.EvalString(ctx, vars) })
		if err != nil {
			return "", err
		}
		if key == "" {
			return "", &validationError{errs: []error{&huma.ErrorDetail{Location: field, Message: "the idempotency key is empty"}}}
		}
	case hook.Signature == bundle.SignatureGitHub:
		key = strings.TrimSpace(headers.Get(headerGitHubDelivery))
	}
	return storableKey(key, maxHookKey), nil
}

// storableKey is key, or its SHA-256 ("sha256:<hex>") when it is longer than
// max bytes or holds text the catalog cannot store.
func storableKey(key string, max int) string {
	if len(key) > max || !utf8.ValidString(key) || strings.ContainsRune(key, 0) {
		sum := sha256.Sum256([]byte(key))
		return "sha256:" + hex.EncodeToString(sum[:])
	}
	return key
}

// vaultError is the error of a secret that cannot be used: no key (503
// secret_key_missing), or one the server cannot open (500, logged: the operator's
// key configuration is at fault, not the sender).
func (s *Server) vaultError(err error) error {
	if err == nil {
		return fmt.Errorf("hook: %w", errNoSecretKey)
	}
	return fmt.Errorf("reveal a hook's secret: %w", err)
}

// evalHook compiles src (validated at deploy) and evaluates it with eval; a failure
// is a 422 naming the manifest field.
func evalHook[T any](ctx context.Context, src string, vars expr.Vars, field string, eval func(*expr.Program) (T, error)) (T, error) {
	var zero T
	prog, err := expr.HookEnv.Compile(src)
	if err == nil {
		var v T
		v, err = eval(prog)
		if err == nil {
			return v, nil
		}
	}
	if ctx.Err() != nil {
		return zero, ctx.Err()
	}
	return zero, &validationError{errs: []error{&huma.ErrorDetail{Location: field, Message: err.Error()}}}
}

// hookVars are the names a hook's expressions see: body (the JSON body; any other
// body as a string; an empty one as null) and headers (lower-case names → the first
// value).
func hookVars(body []byte, header http.Header) (expr.Vars, error) {
	headers := make(map[string]string, len(header))
	for k, v := range header {
		if len(v) > 0 {
			headers[strings.ToLower(k)] = v[0]
		}
	}
	vars := expr.Vars{expr.Headers: headers}
	switch {
	case len(strings.TrimSpace(string(body))) == 0:
		vars[expr.Body] = nil
	case json.Valid(body):
		vars[expr.Body] = json.RawMessage(body)
	case utf8.Valid(body):
		vars[expr.Body] = string(body)
	default:
		return nil, withDetail(errUnsupportedBody, "the body is neither JSON nor UTF-8 text")
	}
	return vars, nil
}

// verifySignature checks a delivery's signature in style with secret, in constant
// time. Its error says what is missing or wrong, never the expected value.
func verifySignature(style string, secret, body []byte, header http.Header, now time.Time) error {
	switch style {
	case bundle.SignatureHMACSHA256, bundle.SignatureGitHub:
		name := headerCairnSignature
		if style == bundle.SignatureGitHub {
			name = headerGitHubSignature
		}
		got := header.Get(name)
		if got == "" {
			return fmt.Errorf("the delivery has no %s header", name)
		}
		hexSig, ok := strings.CutPrefix(strings.TrimSpace(got), "sha256=")
		if !ok || !macEqual(secret, body, hexSig) {
			return fmt.Errorf("the %s signature does not match the body", name)
		}
		return nil
	case bundle.SignatureStripe:
		got := header.Get(headerStripeSignature)
		if got == "" {
			return fmt.Errorf("the delivery has no %s header", headerStripeSignature)
		}
		var ts string
		var sigs []string
		for _, item := range strings.Split(got, ",") {
			k, v, _ := strings.Cut(strings.TrimSpace(item), "=")
			switch k {
			case "t":
				ts = v
			case "v1":
				sigs = append(sigs, v)
			}
		}
		t, err := strconv.ParseInt(ts, 10, 64)
		if err != nil || len(sigs) == 0 {
			return fmt.Errorf("the %s header lacks t=<unix time> or v1=<signature>", headerStripeSignature)
		}
		payload := make([]byte, 0, len(ts)+1+len(body))
		payload = append(append(append(payload, ts...), '.'), body...)
		match := false
		for _, sig := range sigs {
			// Every candidate is checked, so the time taken does not say which matched.
			if macEqual(secret, payload, sig) {
				match = true
			}
		}
		if !match {
			return fmt.Errorf("the %s signature does not match the body", headerStripeSignature)
		}
		if age := now.Sub(time.Unix(t, 0)); age > stripeTolerance || age < -stripeTolerance {
			return fmt.Errorf("the %s timestamp is %s away from the server's time, over the tolerance of %s (a replayed delivery?)", headerStripeSignature, age.Round(time.Second), stripeTolerance)
		}
		return nil
	}
	return fmt.Errorf("unknown signature style %q", style)
}

// macEqual reports whether hexSig is the hex HMAC-SHA256 of msg under key, comparing
// in constant time.
func macEqual(key, msg []byte, hexSig string) bool {
	got, err := hex.DecodeString(strings.TrimSpace(hexSig))
	if err != nil {
		return false
	}
	m := hmac.New(sha256.New, key)
	m.Write(msg)
	return hmac.Equal(got, m.Sum(nil))
}
