package api

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/cairnrun/cairn/functions"
)

// streamedBodyOps are the operations that read their request body as a stream, through
// their own huma.Resolver: Huma's BodyReadTimeout (5 s for the whole body) does not
// cover them, and a 5 s total would cut legitimate large uploads. Their bodies are
// guarded by a minimum rate instead (guardedBody). A new streamed operation belongs here.
var streamedBodyOps = map[string]bool{
	"uploadBundle":  true,
	"putCheckpoint": true,
}

// errSlowBody is what a read of a guarded body returns when the client sent less than
// the minimum rate: the read deadline passed, and net/http closes the connection once
// the answer is written. (net/http also cancels the request's context then, so the
// answer is the 499 of a client gone.)
var errSlowBody = errors.New("the request body arrived too slowly")

// guardedBody wraps a request body. Once armed (for a streamed operation), each Read
// sets the connection's read deadline so that, over every window the server spends
// waiting in Read, at least min bytes arrive: a 1-byte-per-second trickle is cut
// after one window, while an upload of any size at a reasonable rate goes on. Only
// time spent waiting in Read counts, so a slow consumer (the blob store taking a
// multipart part) never makes the client look slow. An unarmed guardedBody only
// notes whether the body was read to its end.
//
// Why not http.Server.ReadTimeout: it bounds the whole request, so it would have to
// allow for the largest legitimate upload (a 1 GiB bundle over a slow link takes
// many minutes), and a trickle could hold a connection for all that time.
type guardedBody struct {
	io.ReadCloser
	rc     *http.ResponseController
	window time.Duration
	min    int64 // bytes due per window

	armed  bool
	waited time.Duration // spent in Read in the current window
	got    int64         // bytes read in the current window
	total  int64
	eof    bool // read to its end
	slow   bool // cut: it came slower than the minimum rate
}

func (g *guardedBody) Read(p []byte) (int, error) {
	if !g.armed {
		n, err := g.ReadCloser.Read(p)
		g.total += int64(n)
		g.done(err)
		return n, err
	}
	start := time.Now()
	_ = g.rc.SetReadDeadline(start.Add(g.window - g.waited))
	n, err := g.ReadCloser.Read(p)
	g.waited += time.Since(start)
	g.got += int64(n)
	g.total += int64(n)
	if g.got >= g.min {
		g.waited, g.got = 0, 0
	}
	g.done(err)
	if g.slow {
		err = fmt.Errorf("%w: %w", errSlowBody, err)
	}
	return n, err
}

// done notes how a read ended. At the end of the body no deadline may outlive it:
// net/http's background read would fail at it and cancel the request. After a slow
// read the deadline stays in the past, so that net/http, trying to drain what is left
// of the body, fails at once and closes the connection.
func (g *guardedBody) done(err error) {
	switch {
	case err == nil:
	case errors.Is(err, io.EOF):
		if !g.eof {
			g.eof = true
			_ = g.rc.SetReadDeadline(time.Time{})
		}
	case errors.Is(err, os.ErrDeadlineExceeded):
		g.slow = true
	}
}

// withBodyGuard wraps every request body in a guardedBody (armed later, for streamed
// operations, by bodyGuardMiddleware) and gives the connection a first read deadline
// of one window. Huma replaces it with its own for the JSON bodies it reads; an armed
// body replaces it read by read. It stays for a body nobody reads: net/http drains up
// to 256 KiB of such a body to reuse the connection (when the response is sent, or
// after the handler), and without a deadline a trickling client (say, one refused with
// 401 before its body was read) would hold the connection for ever. After the
// handler, a body not read to its end gets one more window for that drain.
func (s *Server) withBodyGuard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		g := &guardedBody{
			ReadCloser: r.Body,
			rc:         http.NewResponseController(w),
			window:     s.cfg.BodyReadTimeout,
			min:        max(1, int64(s.cfg.BodyReadTimeout.Seconds()*float64(s.cfg.MinBodyRate))),
		}
		_ = g.rc.SetReadDeadline(time.Now().Add(g.window))
		r.Body = g
		next.ServeHTTP(w, r)
		if g.slow {
			s.metrics.slowBody()
			s.logger.InfoContext(r.Context(), "request body too slow: connection closed",
				"request_id", RequestID(r.Context()), "path", functions.MaskCallbackPath(r.URL.Path), "bytes", g.total,
				"min_rate", s.cfg.MinBodyRate, "window", s.cfg.BodyReadTimeout)
		}
		if !g.eof && !g.slow {
			g.drain(drainLimit)
		}
	})
}

// drainLimit is how much of a request body the server reads and drops after it
// answered without reading it all (a bundle refused at its first tar header, a 401):
// enough for the body of a decompression bomb (a 4 GiB entry compresses to about
// 4 MiB), small enough not to matter. A longer body is cut: the connection is
// closed on it.
const drainLimit = 16 << 20

// drain sends the answer the handler wrote, then reads what is left of the body,
// up to limit bytes, within one window at the body's minimum rate. Closing the
// connection on unread data makes the kernel reset it, and a client that sends its
// whole request before it reads (most simple clients, curl while it sends) then
// sees "connection reset by peer" instead of the answer. A body read to its end
// leaves the connection as usable as any other. net/http's own drain after the
// handler (256 KiB) gets one more window for what is left beyond limit.
func (g *guardedBody) drain(limit int64) {
	_ = g.rc.Flush()
	g.armed = true
	g.waited, g.got = 0, 0
	_, _ = io.CopyN(io.Discard, g, limit)
	if !g.eof && !g.slow {
		_ = g.rc.SetReadDeadline(time.Now().Add(g.window))
	}
}

// bodyGuardMiddleware arms the body guard of the streamed operations.
func (s *Server) bodyGuardMiddleware(ctx huma.Context, next func(huma.Context)) {
	if streamedBodyOps[ctx.Operation().OperationID] {
		r, _ := humago.Unwrap(ctx)
		if g, ok := r.Body.(*guardedBody); ok {
			g.armed = true
		}
	}
	next(ctx)
}
