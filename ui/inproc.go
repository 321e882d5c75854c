package ui

import (
	"io"
	"net/http"
	"sync"

	"github.com/cairnrun/cairn/api"
)

// inProcess is an http.RoundTripper that serves each request with a handler in this
// process (the API's), streaming the response body through a pipe: the UI calls the
// API exactly as the CLI does (same routes, roles and problems) without a network
// hop, and long responses (an event stream, a log, an output) flow as they are
// written.
//
// Each request acts as who (api.WithIdentity), the session's user: no token is
// held by the UI, or sent.
type inProcess struct {
	h   http.Handler
	who api.Identity
}

func (t inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	in := req.Clone(api.WithIdentity(req.Context(), t.who))
	in.RequestURI = req.URL.RequestURI()
	in.RemoteAddr = "ui"
	if in.Body == nil {
		in.Body = http.NoBody
	}
	pr, pw := io.Pipe()
	w := &pipeWriter{header: http.Header{}, pw: pw, ready: make(chan struct{})}
	go func() {
		defer func() {
			if v := recover(); v != nil {
				_ = pw.CloseWithError(errHandlerPanic)
				w.writeHeader(http.StatusInternalServerError)
				return
			}
			w.writeHeader(http.StatusOK) // a handler that wrote nothing
			_ = pw.Close()
		}()
		t.h.ServeHTTP(w, in)
	}()
	select {
	case <-w.ready:
	case <-req.Context().Done():
		_ = pr.CloseWithError(req.Context().Err())
		return nil, req.Context().Err()
	}
	return &http.Response{
		Status:        http.StatusText(w.status),
		StatusCode:    w.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        w.sent,
		Body:          pr,
		ContentLength: -1,
		Request:       req,
	}, nil
}

type handlerPanic struct{}

func (handlerPanic) Error() string { return "the API handler panicked" }

var errHandlerPanic error = handlerPanic{}

// pipeWriter is the http.ResponseWriter of an in-process request: the status and a
// copy of the headers are handed over once (ready), the body goes through the pipe.
type pipeWriter struct {
	header http.Header
	sent   http.Header
	status int
	pw     *io.PipeWriter
	once   sync.Once
	ready  chan struct{}
}

func (w *pipeWriter) Header() http.Header { return w.header }

func (w *pipeWriter) WriteHeader(code int) {
	if code >= 100 && code < 200 {
		return // informational responses are not passed on
	}
	w.writeHeader(code)
}

func (w *pipeWriter) writeHeader(code int) {
	w.once.Do(func() {
		w.status = code
		w.sent = w.header.Clone()
		close(w.ready)
	})
}

func (w *pipeWriter) Write(b []byte) (int, error) {
	w.writeHeader(http.StatusOK)
	return w.pw.Write(b)
}

// Flush does nothing: every Write already waits for its reader.
func (w *pipeWriter) Flush() {}
