package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
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
}

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
	http.StatusRequestEntityTooLarge: {"payload_too_large", "Payload too large"},
	http.StatusUnsupportedMediaType:  {"unsupported_media_type", "Unsupported media type"},
	http.StatusUnprocessableEntity:   {"invalid_input", "Invalid input"},
	http.StatusInternalServerError:   {"internal", "Internal server error"},
	http.StatusServiceUnavailable:    {"unavailable", "Service unavailable"},
	http.StatusGatewayTimeout:        {"timeout", "Timeout"},
}

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
// with the request ID.
func (s *Server) problemFor(ctx context.Context, err error) *Problem {
	var p *Problem
	var ready *readyError
	s.logger.DebugContext(ctx, "request error", "request_id", RequestID(ctx), "error", err)
	switch {
	case errors.As(err, &p):
		return p
	case errors.As(err, &ready):
		p = NewProblem(http.StatusServiceUnavailable, "a readiness check failed")
		p.Checks = ready.checks
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
