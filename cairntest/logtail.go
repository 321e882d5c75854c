package cairntest

import (
	"log/slog"
	"sync"
)

// logTailSize is how much of the server's log a failed test shows.
const logTailSize = 256 << 10

// logTail keeps the newest logTailSize bytes written to it, for a failed test's
// output; it also forwards the log to a logger of the user's (WithLogger). It is
// safe for concurrent use.
type logTail struct {
	mu      sync.Mutex
	buf     []byte
	forward *slog.Logger
}

func newLogTail(forward *slog.Logger) *logTail { return &logTail{forward: forward} }

// Write implements io.Writer: it keeps the tail of what was written.
func (l *logTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	if over := len(l.buf) - logTailSize; over > 0 {
		l.buf = append(l.buf[:0], l.buf[over:]...)
	}
	return len(p), nil
}

// String returns the tail kept.
func (l *logTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.buf)
}

// logger returns the server's logger: text into the tail, and to the user's
// logger when there is one.
func (l *logTail) logger() *slog.Logger {
	h := slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelInfo})
	if l.forward == nil {
		return slog.New(h)
	}
	return slog.New(slog.NewMultiHandler(h, l.forward.Handler()))
}
