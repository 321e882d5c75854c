package api

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"

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
		Detail: detail,
	}
	for _, err := range errs {
		if err == nil {
			continue
		}
		var d *huma.ErrorDetail
		if errors.As(err, &d) {
			p.Errors = append(p.Errors, d)
			continue
		}
		p.Errors = append(p.Errors, &huma.ErrorDetail{Message: err.Error()})
	}
	return p
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
