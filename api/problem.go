package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/danielgtaylor/huma/v2"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/catalog"
)

// Problem is an RFC 9457 problem document. Type and Code are stable per error class;
// clients switch on Code, never on Title or Detail.
type Problem struct {
	Type     string              `json:"type" doc:"URI of the error class, urn:cairn:problem:<code>"`
	Title    string              `json:"title" doc:"short summary of the error class"`
	Status   int                 `json:"status" doc:"HTTP status code"`
	Code     string              `json:"code" doc:"stable machine-readable error class"`
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

// The stable error classes and their statuses.
var problemClasses = map[int]struct{ code, title string }{
	http.StatusBadRequest:            {"bad_request", "Bad request"},
	http.StatusUnauthorized:          {"unauthorized", "Unauthorized"},
	http.StatusForbidden:             {"forbidden", "Forbidden"},
	http.StatusNotFound:              {"not_found", "Not found"},
	http.StatusMethodNotAllowed:      {"method_not_allowed", "Method not allowed"},
	http.StatusConflict:              {"conflict", "Conflict"},
	statusClientClosedRequest:        {"client_closed_request", "Client closed request"},
	http.StatusRequestEntityTooLarge: {"payload_too_large", "Payload too large"},
	http.StatusUnsupportedMediaType:  {"unsupported_media_type", "Unsupported media type"},
	http.StatusUnprocessableEntity:   {"invalid_input", "Invalid input"},
	http.StatusInternalServerError:   {"internal", "Internal server error"},
	http.StatusServiceUnavailable:    {"unavailable", "Service unavailable"},
	http.StatusGatewayTimeout:        {"timeout", "Timeout"},
}

// statusClientClosedRequest is the status of a request the client abandoned before
// the answer (nginx's 499): nobody reads the response, and the access log shows it
// apart from the server's own failures.
const statusClientClosedRequest = 499

// retryAfterSeconds is the Retry-After of a 503 for an unavailable database: a
// restart or a failover takes seconds, and a client retrying at once only adds load.
const retryAfterSeconds = 5

// NewProblem builds the problem for an HTTP status with a detail message.
func NewProblem(status int, detail string, errs ...error) *Problem {
	class, ok := problemClasses[status]
	if !ok {
		class.code, class.title = fmt.Sprintf("http_%d", status), http.StatusText(status)
	}
	p := &Problem{
		Type:   "urn:cairn:problem:" + class.code,
		Title:  class.title,
		Status: status,
		Code:   class.code,
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

// What a problem repeats of a request is bounded (security audit 1, W8: a 900 KB
// cursor was echoed whole): a bad value is shown by its first maxEchoed bytes, then
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

// useProblems makes Huma's own errors (validation, unknown content type) Problems.
// huma.NewError is a package variable by Huma's design; it is set once, to a pure
// function, so every Server shares it safely.
func useProblems() {
	installProblems.Do(func() {
		huma.NewError = func(status int, msg string, errs ...error) huma.StatusError {
			return NewProblem(status, msg, errs...)
		}
	})
}

// readyError is the 503 of /readyz, carrying the checks.
type readyError struct{ checks map[string]string }

func (e *readyError) Error() string { return "not ready" }

// problemFor maps an error from the domain to its problem. It is the one place where
// errors become statuses; unknown errors are 500s without internal detail, logged once
// with the request ID. A database that cannot be reached is a 503 with Retry-After,
// logged once at WARN; a request its client abandoned is not an error at all.
func (s *Server) problemFor(ctx context.Context, err error) *Problem {
	var p *Problem
	var ready *readyError
	if errors.Is(err, errSlowBody) {
		// The body guard cut a trickling upload (net/http then cancels the request's
		// context too): the client is slow, not gone.
		s.logger.InfoContext(ctx, "request body too slow", "request_id", RequestID(ctx))
		return NewProblem(http.StatusRequestTimeout, "the request body arrived too slowly")
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		// The client went away (net/http cancels the request's context): whatever
		// the handler failed with then (context.Canceled, a canceled statement, a
		// broken stream) is not a fault of ours, and nobody reads the answer.
		s.logger.DebugContext(ctx, "client closed request", "request_id", RequestID(ctx), "error", err)
		return NewProblem(statusClientClosedRequest, "the client closed the request")
	}
	s.logger.DebugContext(ctx, "request error", "request_id", RequestID(ctx), "error", err)
	switch {
	case errors.As(err, &p):
		return p
	case errors.As(err, &ready):
		p = NewProblem(http.StatusServiceUnavailable, "a readiness check failed")
		p.Checks = ready.checks
		return p
	case errors.Is(err, catalog.ErrUnavailable):
		// Before DeadlineExceeded: a connect that timed out is both.
		s.logger.WarnContext(ctx, "database unavailable", "request_id", RequestID(ctx), "error", err)
		p = NewProblem(http.StatusServiceUnavailable, "the database is unavailable; try again later")
		p.headers = http.Header{"Retry-After": {strconv.Itoa(retryAfterSeconds)}}
		return p
	case errors.Is(err, catalog.ErrNotFound), errors.Is(err, blobstore.ErrNotFound):
		return NewProblem(http.StatusNotFound, "not found")
	case errors.Is(err, catalog.ErrConflict):
		return NewProblem(http.StatusConflict, "the request conflicts with the current state")
	case errors.Is(err, catalog.ErrInvalidInput):
		// The input checks (checkText, the schema's bounds) should have caught the
		// value: the request is still at fault, but a check is missing.
		s.logger.WarnContext(ctx, "database refused a value of the request", "request_id", RequestID(ctx), "error", err)
		return NewProblem(http.StatusBadRequest, "the request holds a value the database cannot store (a NUL character, invalid UTF-8, an unpaired surrogate or a number out of range)")
	case errors.Is(err, context.DeadlineExceeded):
		return NewProblem(http.StatusGatewayTimeout, "the request took too long")
	}
	s.logger.ErrorContext(ctx, "request failed", "request_id", RequestID(ctx), "error", err)
	p = NewProblem(http.StatusInternalServerError, "an internal error occurred; quote the request ID when reporting it")
	p.Instance = RequestID(ctx)
	return p
}

// withUnavailable documents the 503 of op, with its Retry-After header, when op is
// under /v1: every such operation reads or writes the catalog. (Listing 503 in
// op.Errors would document it without the header.)
func withUnavailable(api huma.API, op huma.Operation) huma.Operation {
	if !strings.HasPrefix(op.Path, "/v1/") {
		return op
	}
	responses := make(map[string]*huma.Response, len(op.Responses)+1)
	maps.Copy(responses, op.Responses)
	responses[strconv.Itoa(http.StatusServiceUnavailable)] = &huma.Response{
		Description: "The database is unavailable (down, restarting, out of connections); try again after Retry-After.",
		Headers: map[string]*huma.Param{
			"Retry-After": {Description: "seconds to wait before trying again", Schema: &huma.Schema{Type: "integer"}},
		},
		Content: map[string]*huma.MediaType{
			"application/problem+json": {Schema: api.OpenAPI().Components.Schemas.Schema(reflect.TypeFor[Problem](), true, "Problem")},
		},
	}
	op.Responses = responses
	return op
}
