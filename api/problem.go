package api

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/danielgtaylor/huma/v2"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/functions"
	"github.com/cairnrun/cairn/secrets"
)

// Problem is an RFC 9457 problem document. Type and Code are stable per error class
// (the table in docs/api.md); clients switch on Code, never on Title or Detail.
type Problem struct {
	Type     string              `json:"type" doc:"URI of the error class, urn:cairn:problem:<code>"`
	Title    string              `json:"title" doc:"short summary of the error class"`
	Status   int                 `json:"status" doc:"HTTP status code"`
	Code     string              `json:"code" doc:"stable machine-readable error class, such as not_found, idempotency_key_reused, run_finished, lease_lost, invalid_cursor, invalid_bundle, validation_failed or unavailable: the API description and each response list them"`
	Detail   string              `json:"detail,omitempty" doc:"what went wrong in this occurrence"`
	Instance string              `json:"instance,omitempty" doc:"request ID of this occurrence"`
	Errors   []*huma.ErrorDetail `json:"errors,omitempty" doc:"the individual problems with the input"`
	Checks   map[string]string   `json:"checks,omitempty" doc:"readiness checks, on 503 from /readyz"`

	headers http.Header // sent with the problem (Retry-After)
}

// GetHeaders implements huma.HeadersError: headers sent with the problem.
func (p *Problem) GetHeaders() http.Header { return p.headers }

// Error implements error.
func (p *Problem) Error() string { return p.Detail }

// GetStatus implements huma.StatusError.
func (p *Problem) GetStatus() int { return p.Status }

// ContentType implements huma.ContentTypeFilter: problems are application/problem+json.
func (p *Problem) ContentType(ct string) string {
	if ct == "application/json" {
		return "application/problem+json"
	}
	if ct == "application/cbor" {
		return "application/problem+cbor"
	}
	return ct
}

// problemClass is a stable error class: clients switch on its code, and the HTTP
// status comes from it (never the other way round). Every class is declared here,
// mapped from errors by problemFor, and listed in docs/api.md.
type problemClass struct {
	status int
	code   string
	title  string
	about  string // when a server answers it: the OpenAPI document and docs/api.md
}

// The error classes.
var (
	classBadRequest           = problemClass{http.StatusBadRequest, "bad_request", "Bad request", "The request is malformed: a body that is not valid JSON, a path parameter or header of the wrong form."}
	classInvalidCursor        = problemClass{http.StatusBadRequest, "invalid_cursor", "Invalid cursor", "The cursor was not issued by this deployment, was altered, or belongs to another list or to other filters: list again without it."}
	classInvalidBundle        = problemClass{http.StatusBadRequest, "invalid_bundle", "Invalid bundle", "The bundle was refused; `errors` names each archive entry, step and manifest field at fault. Nothing was stored."}
	classUnauthorized         = problemClass{http.StatusUnauthorized, "unauthorized", "Unauthorized", "No bearer token, or one the server does not know (PUT …/checkpoint: no valid lease credential; POST /v1/callbacks/{token}: a token the server did not sign; POST /v1/hooks/…: no valid signature, or the hook's secret is not set). Nothing was started."}
	classForbidden            = problemClass{http.StatusForbidden, "forbidden", "Forbidden", "The token's role is below the one the operation needs, or (approve, reject) not among the approval step's roles, or (approve) a token without a name on a step that needs more than one approver."}
	classNotFound             = problemClass{http.StatusNotFound, "not_found", "Not found", "The workflow, version, run, step, output, log or bundle does not exist (an output: not yet)."}
	classRequestTimeout       = problemClass{http.StatusRequestTimeout, "request_timeout", "Request timeout", "The request body arrived more slowly than the server accepts (CAIRN_MIN_BODY_RATE); the connection is closed."}
	classConflict             = problemClass{http.StatusConflict, "conflict", "Conflict", "The request conflicts with a change made at the same time; try again."}
	classIdempotencyReused    = problemClass{http.StatusConflict, "idempotency_key_reused", "Idempotency key reused", "The Idempotency-Key was used before with a different request. Nothing was created."}
	classRunFinished          = problemClass{http.StatusConflict, "run_finished", "Run already finished", "The run has already finished: it cannot be canceled or signaled."}
	classInvalidRunState      = problemClass{http.StatusConflict, "invalid_run_state", "Invalid run state", "The run is not in a state the action applies to: retry and rerun need a run that has ended (failed or canceled for retry), pause one that has not, resume a paused one, approve and reject a step waiting for approval (a step decided already is refused, a repeat of one's own decision included); `detail` says the run's or step's state."}
	classCallbackNotWaiting   = problemClass{http.StatusConflict, "callback_not_waiting", "Callback no longer awaited", "POST /v1/callbacks/{token}: the token is genuine, but its step no longer waits for that attempt's callback (it was completed already, timed out, canceled, or runs again; or a callback is kept for it already), or another request for it is being received at this moment. Nothing changed, and the body was not stored."}
	classIncompatibleVersion  = problemClass{http.StatusConflict, "incompatible_version", "Incompatible version", "The version asked for lacks steps the run keeps (same key, same needs); `detail` names them. Nothing changed."}
	classNothingToRollBack    = problemClass{http.StatusConflict, "nothing_to_roll_back", "Nothing to roll back to", "The alias has no earlier version to go back to: the version it names is the first of its history, or every earlier one was rolled back already; `detail` says which version it names. Nothing changed."}
	classLeaseLost            = problemClass{http.StatusConflict, "lease_lost", "Lease no longer current", "The attempt's lease is no longer current (it expired, or the step was canceled or handed back): nothing was stored."}
	classPayloadTooLarge      = problemClass{http.StatusRequestEntityTooLarge, "payload_too_large", "Payload too large", "The body, or a bundle's archive or files, is over the server's limit. Nothing was stored."}
	classUnsupportedMediaType = problemClass{http.StatusUnsupportedMediaType, "unsupported_media_type", "Unsupported media type", "The body's Content-Type is not one the operation takes."}
	classValidationFailed     = problemClass{http.StatusUnprocessableEntity, "validation_failed", "Validation failed", "A parameter or body value breaks the operation's schema (a bound, a pattern, a required field) or holds text the catalog cannot store; `errors` names each location."}
	classQuotaExceeded        = problemClass{http.StatusTooManyRequests, "quota_exceeded", "Quota exceeded", "The run would go over its namespace's runs_per_minute quota (`detail` names the quota and the namespace; GET /v1/namespaces/{namespace}/quotas). Nothing was created; try again after Retry-After."}
	classClientClosed         = problemClass{statusClientClosedRequest, "client_closed_request", "Client closed request", "The client went away before the answer; only the server's logs show it."}
	classInternal             = problemClass{http.StatusInternalServerError, "internal", "Internal server error", "A fault of the server. The problem carries only the request ID (`instance`): quote it when reporting it."}
	classUnavailable          = problemClass{http.StatusServiceUnavailable, "unavailable", "Service unavailable", "The database or the blob store cannot be reached, the server has its maximum of open connections or event streams, or (GET /readyz) a readiness check failed; try again after Retry-After."}
	classNoSecretKey          = problemClass{http.StatusServiceUnavailable, "secret_key_missing", "No secret key", "The server has no secret key, so secrets can be neither stored nor used (PUT /v1/secrets, webhook deliveries): set CAIRN_SECRET_KEY (32 random bytes in base64, the same on every server) and restart."}
	classTimeout              = problemClass{http.StatusGatewayTimeout, "timeout", "Timeout", "The request ran out of time inside the server; try again."}
	classNamespaceNotFound    = problemClass{http.StatusNotFound, "namespace_not_found", "Namespace not found", "The namespace the Cairn-Namespace header (or a webhook's ?namespace=) names does not exist, or the token is scoped to another one."}
)

// problemClasses lists every class, in the order of docs/api.md's table.
var problemClasses = []problemClass{
	classBadRequest, classInvalidCursor, classInvalidBundle, classUnauthorized, classForbidden,
	classNotFound, classNamespaceNotFound, classRequestTimeout, classConflict, classIdempotencyReused, classRunFinished,
	classInvalidRunState, classCallbackNotWaiting, classIncompatibleVersion, classNothingToRollBack, classLeaseLost, classPayloadTooLarge, classUnsupportedMediaType, classValidationFailed,
	classQuotaExceeded, classClientClosed, classInternal, classUnavailable, classNoSecretKey, classTimeout,
}

// classOfStatus is the class of an error that Huma (or an authentication
// middleware) knows by its status only: the general class of that status, or
// http_<status> for a status Cairn gives no class of its own.
func classOfStatus(status int) problemClass {
	for _, c := range []problemClass{
		classBadRequest, classUnauthorized, classForbidden, classNotFound, classRequestTimeout,
		classConflict, classPayloadTooLarge, classUnsupportedMediaType, classValidationFailed,
		classClientClosed, classInternal, classUnavailable, classTimeout,
	} {
		if c.status == status {
			return c
		}
	}
	return problemClass{status: status, code: fmt.Sprintf("http_%d", status), title: http.StatusText(status)}
}

// problem returns the problem of class c with a detail message and the individual
// problems with the input.
func (c problemClass) problem(detail string, errs ...error) *Problem {
	p := &Problem{
		Type:   "urn:cairn:problem:" + c.code,
		Title:  c.title,
		Status: c.status,
		Code:   c.code,
		Detail: truncate(detail, maxProblemDetail),
	}
	for _, err := range errs {
		if err == nil {
			continue
		}
		if len(p.Errors) == maxProblemErrors {
			p.Errors = append(p.Errors, &huma.ErrorDetail{Message: fmt.Sprintf("and %d more errors", countErrors(errs)-maxProblemErrors)})
			break
		}
		var d *huma.ErrorDetail
		var pathErr *fs.PathError
		switch {
		case errors.As(err, &d):
			p.Errors = append(p.Errors, &huma.ErrorDetail{
				Message:  truncate(d.Message, maxEchoedMessage),
				Location: truncate(d.Location, maxEchoedLocation),
				Value:    echoValue(d.Value),
			})
		case errors.As(err, &pathErr):
			// A file's error names a path of the server's: not the client's business.
			p.Errors = append(p.Errors, &huma.ErrorDetail{Message: "a file operation failed"})
		default:
			p.Errors = append(p.Errors, &huma.ErrorDetail{Message: truncate(err.Error(), maxEchoedMessage)})
		}
	}
	return p
}

// retryAfter returns p with a Retry-After header of seconds.
func (p *Problem) retryAfter(seconds int) *Problem {
	p.headers = http.Header{"Retry-After": {strconv.Itoa(seconds)}}
	return p
}

// statusClientClosedRequest is the status of a request the client abandoned before
// the answer (nginx's 499): nobody reads the response, and the access log shows it
// apart from the server's own failures.
const statusClientClosedRequest = 499

// retryAfterSeconds is the Retry-After of a 503 for an unavailable database: a
// restart or a failover takes seconds, and a client retrying at once only adds load.
const retryAfterSeconds = 5

// Errors of the API's own, for problemFor to map; the handler says what happened
// with withDetail. (Errors of the domain are the catalog's, blobstore's and bundle's
// sentinels; the cursor's, the body guard's and the event streams' are beside them.)
var (
	errBadRequest   = errors.New("bad request")
	errUnauthorized = errors.New("unauthorized")
	errNotFound     = errors.New("not found")
	errTooLarge     = errors.New("too large")
	// errNoSecretKey: a webhook delivery came to a server without a secret key.
	errNoSecretKey = errors.New("no secret key")
	// errUnsupportedBody: a body the operation cannot read (a webhook's that is
	// neither JSON nor text).
	errUnsupportedBody = errors.New("unsupported body")
)

// detailedError gives an error the detail a client is shown. Its class still comes
// from the error it wraps.
type detailedError struct {
	err    error
	detail string
}

func (e *detailedError) Error() string { return e.detail + ": " + e.err.Error() }
func (e *detailedError) Unwrap() error { return e.err }

// withDetail returns err with a detail for the client (a format and its arguments).
// The text must say what the client did or asked for: it is shown as it is.
func withDetail(err error, format string, args ...any) error {
	return &detailedError{err: err, detail: fmt.Sprintf(format, args...)}
}

// detailOr returns the detail withDetail gave err, or def.
func detailOr(err error, def string) string {
	var d *detailedError
	if errors.As(err, &d) {
		return d.detail
	}
	return def
}

// validationError is input that breaks a rule Huma's schema validation cannot state
// (text the catalog cannot store): each error is a *huma.ErrorDetail naming the
// location. It is a 422 validation_failed, like Huma's own validation errors.
type validationError struct{ errs []error }

func (e *validationError) Error() string { return "validation failed" }

// readyError is the 503 of /readyz, carrying the checks.
type readyError struct{ checks map[string]string }

func (e *readyError) Error() string { return "not ready" }

// What a problem repeats of a request is bounded (a 900 KB cursor was once
// echoed whole): a bad value is shown by its first maxEchoed bytes, then
// "…"; a location (which may hold a client's field name) and a message (which may
// quote a value) are cut likewise at larger bounds; at most maxProblemErrors errors
// are listed.
const (
	maxEchoed         = 64
	maxEchoedLocation = 256
	maxEchoedMessage  = 512
	maxProblemDetail  = 2048
	maxProblemErrors  = 100
)

func countErrors(errs []error) int {
	n := 0
	for _, err := range errs {
		if err != nil {
			n++
		}
	}
	return n
}

// truncate returns s cut to at most n bytes on a rune boundary, followed by "…"
// when it was cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// echoValue returns the value of an error detail as a problem shows it: a string
// cut to maxEchoed bytes; another value whose JSON is longer, as that JSON cut to
// maxEchoed bytes.
func echoValue(v any) any {
	switch x := v.(type) {
	case nil, bool, int, int64, float64:
		return x
	case string:
		return truncate(x, maxEchoed)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	if len(b) <= maxEchoed {
		return v
	}
	return truncate(string(b), maxEchoed)
}

var installProblems sync.Once

// useProblems makes Huma's own errors (validation, unknown content type) Problems of
// the general class of their status. huma.NewError is a package variable by Huma's
// design; it is set once, to a pure function, so every Server shares it safely.
func useProblems() {
	installProblems.Do(func() {
		huma.NewError = func(status int, msg string, errs ...error) huma.StatusError {
			return classOfStatus(status).problem(msg, errs...)
		}
	})
}

// problemFor maps an error to its problem. It is the one place where errors become
// classes, and so statuses; handlers only return errors. Unknown errors are 500s
// that carry only the request ID, logged once at ERROR. A database that cannot be
// reached is a 503 with Retry-After, logged once at WARN; a request its client
// abandoned is not an error at all.
func (s *Server) problemFor(ctx context.Context, err error) *Problem {
	var p *Problem
	var ready *readyError
	var invalid *validationError
	var tooBig *http.MaxBytesError
	var quota *catalog.QuotaError
	if errors.Is(err, errSlowBody) {
		// The body guard cut a trickling upload (net/http then cancels the request's
		// context too): the client is slow, not gone.
		s.logger.InfoContext(ctx, "request body too slow", "request_id", RequestID(ctx))
		return classRequestTimeout.problem("the request body arrived too slowly")
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		// The client went away (net/http cancels the request's context): whatever
		// the handler failed with then (context.Canceled, a canceled statement, a
		// broken stream) is not a fault of ours, and nobody reads the answer.
		s.logger.DebugContext(ctx, "client closed request", "request_id", RequestID(ctx), "error", err)
		return classClientClosed.problem("the client closed the request")
	}
	s.logger.DebugContext(ctx, "request error", "request_id", RequestID(ctx), "error", err)
	switch {
	case errors.As(err, &p):
		return p
	case errors.As(err, &invalid):
		return classValidationFailed.problem("validation failed", invalid.errs...)
	case errors.As(err, &ready):
		p = classUnavailable.problem("a readiness check failed")
		p.Checks = ready.checks
		return p
	case errors.Is(err, catalog.ErrUnavailable):
		// Before DeadlineExceeded: a connect that timed out is both.
		s.logger.WarnContext(ctx, "database unavailable", "request_id", RequestID(ctx), "error", err)
		return classUnavailable.problem("the database is unavailable; try again later").retryAfter(retryAfterSeconds)
	case errors.Is(err, blobstore.ErrUnavailable):
		s.logger.WarnContext(ctx, "blob store unavailable", "request_id", RequestID(ctx), "error", err)
		return classUnavailable.problem("the blob store is unavailable; try again later").retryAfter(retryAfterSeconds)
	case errors.Is(err, secrets.ErrNoKey), errors.Is(err, errNoSecretKey):
		return classNoSecretKey.problem(secrets.ErrNoKey.Error())
	case errors.As(err, &quota):
		return quotaProblem(quota)
	case errors.Is(err, errStreamsFull):
		return classUnavailable.problem(detailOr(err, "the server has its maximum of open event streams")).retryAfter(streamRetryAfter)
	// The conflicts with a class of their own wrap catalog.ErrConflict: first.
	case errors.Is(err, catalog.ErrIdempotencyMismatch):
		return classIdempotencyReused.problem(detailOr(err, "this Idempotency-Key was used with a different request"))
	case errors.Is(err, catalog.ErrRunFinished):
		return classRunFinished.problem("the run has already finished")
	case errors.Is(err, catalog.ErrCallbackNotWaiting):
		// Before ErrRunState, which it wraps.
		return classCallbackNotWaiting.problem(cmp.Or(detailOr(err, ""), "the step no longer waits for this callback"))
	case errors.Is(err, catalog.ErrRunState):
		return classInvalidRunState.problem(cmp.Or(detailOr(err, ""), catalog.Reason(err), "the run's state does not allow this"))
	case errors.Is(err, catalog.ErrIncompatibleVersion):
		return classIncompatibleVersion.problem(cmp.Or(detailOr(err, ""), catalog.Reason(err), "the version lacks steps the run keeps"))
	case errors.Is(err, catalog.ErrNothingToRollBack):
		return classNothingToRollBack.problem(cmp.Or(detailOr(err, ""), catalog.Reason(err), "the alias has no earlier version to roll back to"))
	case errors.Is(err, catalog.ErrLeaseLost):
		return classLeaseLost.problem(detailOr(err, "the lease is no longer current: nothing was stored"))
	case errors.Is(err, catalog.ErrForbidden):
		return classForbidden.problem(forbiddenDetail(err))
	case errors.Is(err, catalog.ErrConflict):
		return classConflict.problem("the request conflicts with the current state")
	case errors.Is(err, catalog.ErrNotFound), errors.Is(err, blobstore.ErrNotFound), errors.Is(err, errNotFound):
		return classNotFound.problem(detailOr(err, "not found"))
	case errors.As(err, &tooBig), errors.Is(err, errTooLarge):
		return classPayloadTooLarge.problem(detailOr(err, "the body is larger than the limit"))
	case errors.Is(err, bundle.ErrInvalid):
		return bundleProblem(err)
	case errors.Is(err, errInvalidCursor):
		return classInvalidCursor.problem(detailOr(err, "invalid cursor"))
	case errors.Is(err, errUnauthorized), errors.Is(err, functions.ErrBadCredential):
		return classUnauthorized.problem(detailOr(err, "unauthorized"))
	case errors.Is(err, errUnsupportedBody):
		return classUnsupportedMediaType.problem(detailOr(err, "the body's type is not one the operation takes"))
	case errors.Is(err, errBadRequest):
		return classBadRequest.problem(detailOr(err, "bad request"))
	case errors.Is(err, catalog.ErrFlowKey):
		msg := err.Error()
		if i := strings.Index(msg, "limit key"); i >= 0 {
			msg = msg[i:]
		}
		return classValidationFailed.problem("the run's input does not give a step its limit key",
			&huma.ErrorDetail{Location: "body.input", Message: msg})
	case errors.Is(err, catalog.ErrInvalidInput):
		// The input checks (checkText, the schema's bounds) should have caught the
		// value: the request is still at fault, but a check is missing.
		s.logger.WarnContext(ctx, "database refused a value of the request", "request_id", RequestID(ctx), "error", err)
		return classBadRequest.problem("the request holds a value the database cannot store (a NUL character, invalid UTF-8, an unpaired surrogate or a number out of range)")
	case errors.Is(err, context.DeadlineExceeded):
		return classTimeout.problem("the request took too long")
	}
	s.logger.ErrorContext(ctx, "request failed", "request_id", RequestID(ctx), "error", err)
	p = classInternal.problem("an internal error occurred; quote the request ID when reporting it")
	p.Instance = RequestID(ctx)
	return p
}

// quotaProblem is the 429 of a run refused by its namespace's quota, with
// Retry-After: when the quota has room again.
func quotaProblem(q *catalog.QuotaError) *Problem {
	secs := max(int(math.Ceil(q.RetryAfter.Seconds())), 1)
	return classQuotaExceeded.problem(fmt.Sprintf("namespace %s is over its %s quota (%d runs per minute): try again in %d s",
		q.Namespace, q.Quota, q.Limit, secs)).retryAfter(secs)
}

// bundleProblem is the problem of a refused bundle: invalid_bundle, or
// payload_too_large for a bundle over a size limit, naming every entry, step and
// field at fault.
func bundleProblem(err error) *Problem {
	class := classInvalidBundle
	if errors.Is(err, bundle.ErrTooLarge) {
		class = classPayloadTooLarge
	}
	var details []error
	var msgs []string
	for _, ve := range bundle.ValidationErrors(err) {
		loc := ve.Path
		if ve.Field != "" {
			loc = strings.TrimPrefix(loc+"#"+ve.Field, "#")
		}
		details = append(details, &huma.ErrorDetail{Location: loc, Message: ve.Describe()})
		msgs = append(msgs, ve.Error())
	}
	detail := "invalid bundle"
	if len(msgs) > 0 {
		detail = "invalid bundle: " + strings.Join(msgs, "; ")
	}
	return class.problem(detail, details...)
}

// errorResponses documents the error classes an operation answers with: one
// response per status, whose description lists each class's code and meaning; a
// 503 also documents Retry-After. Beside declared, every operation may answer
// internal; one under /v1 (every one reads or writes the catalog) unavailable and
// timeout; one with a role unauthorized and forbidden; one with parameters
// validation_failed; one whose JSON body Huma reads the errors of reading it.
func errorResponses[I any](api huma.API, op huma.Operation, role Role, declared []problemClass) map[string]*huma.Response {
	classes := slices.Clone(declared)
	classes = append(classes, classInternal)
	if strings.HasPrefix(op.Path, "/v1/") {
		classes = append(classes, classUnavailable, classTimeout)
	}
	if role != RoleNone {
		classes = append(classes, classUnauthorized, classForbidden, classNamespaceNotFound)
	}
	if op.OperationID == "deliverHook" {
		classes = append(classes, classNamespaceNotFound) // its ?namespace=
	}
	in := reflect.TypeFor[I]()
	if slices.ContainsFunc(reflect.VisibleFields(in), func(f reflect.StructField) bool { return f.IsExported() }) {
		classes = append(classes, classValidationFailed)
	}
	if _, ok := in.FieldByName("Body"); ok {
		classes = append(classes, classBadRequest, classUnsupportedMediaType, classPayloadTooLarge, classRequestTimeout)
	}
	slices.SortStableFunc(classes, func(a, b problemClass) int { return cmp.Compare(a.status, b.status) })
	classes = slices.CompactFunc(classes, func(a, b problemClass) bool { return a.code == b.code })

	schema := api.OpenAPI().Components.Schemas.Schema(reflect.TypeFor[Problem](), true, "Problem")
	responses := make(map[string]*huma.Response, len(op.Responses)+len(classes))
	for k, v := range op.Responses {
		responses[k] = v
	}
	for i := 0; i < len(classes); {
		status := classes[i].status
		var b strings.Builder
		b.WriteString(http.StatusText(status) + ":\n")
		for ; i < len(classes) && classes[i].status == status; i++ {
			fmt.Fprintf(&b, "\n- `%s`: %s", classes[i].code, classes[i].about)
		}
		r := &huma.Response{
			Description: b.String(),
			Content:     map[string]*huma.MediaType{"application/problem+json": {Schema: schema}},
		}
		if status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests {
			r.Headers = map[string]*huma.Param{
				"Retry-After": {Description: "seconds to wait before trying again", Schema: &huma.Schema{Type: "integer"}},
			}
		}
		responses[strconv.Itoa(status)] = r
	}
	return responses
}

// problemTable is the table of error classes in Markdown, as docs/api.md and the
// OpenAPI document's description show it.
func problemTable() string {
	var b strings.Builder
	b.WriteString("| code | status | when |\n|---|---|---|\n")
	for _, c := range problemClasses {
		fmt.Fprintf(&b, "| `%s` | %d | %s |\n", c.code, c.status, c.about)
	}
	return b.String()
}
