package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/cairnrun/cairn/functions"
)

type ctxKey int

const requestIDKey ctxKey = iota

// RequestIDHeader carries the request ID in and out. An incoming value of a safe
// form is kept, so a caller can correlate; otherwise a new one is made.
const RequestIDHeader = "X-Request-Id"

// RequestID returns the ID of the request served under ctx, or "".
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey).(string)
	return id
}

func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func validRequestID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func (s *Server) withRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(RequestIDHeader)
		if !validRequestID(id) {
			id = newRequestID()
		}
		w.Header().Set(RequestIDHeader, id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestIDKey, id)))
	})
}

// statusRecorder remembers the status written, for the access log. It forwards
// Flush so streamed responses (SSE, downloads) keep working.
type statusRecorder struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)
	return n, err
}

func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// withLogging writes one access log line per request: method, path, status, size,
// duration and request ID. Never headers or bodies (tokens live there).
func (s *Server) withLogging(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		s.logger.LogAttrs(r.Context(), levelFor(rec.status), "request",
			slog.String("method", r.Method),
			slog.String("path", functions.MaskCallbackPath(r.URL.Path)),
			slog.Int("status", rec.status),
			slog.Int64("bytes", rec.bytes),
			slog.Duration("duration", time.Since(start)),
			slog.String("request_id", RequestID(r.Context())),
		)
	})
}

func (s *Server) withRecovery(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.logger.ErrorContext(r.Context(), "panic serving request", "request_id", RequestID(r.Context()), "panic", v)
				writeProblem(w, s.problemFor(r.Context(), errPanic))
			}
		}()
		next.ServeHTTP(w, r)
	})
}

var errPanic = errors.New("panic while serving the request")

// levelFor is the access log's level for a response status. A 503 (the database
// unavailable, a readiness check failing) is an outage, not a fault of ours: its
// cause is logged at WARN where it is handled (problemFor, readiness), and the
// access line does not repeat it as an error.
func levelFor(status int) slog.Level {
	switch {
	case status == http.StatusServiceUnavailable:
		return slog.LevelInfo
	case status >= 500:
		return slog.LevelError
	case status >= 400:
		return slog.LevelInfo
	default:
		return slog.LevelDebug
	}
}

// writeProblem writes a problem outside Huma (middleware, raw handlers).
func writeProblem(w http.ResponseWriter, p *Problem) {
	for k, v := range p.headers {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}
