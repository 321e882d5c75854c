package functions

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// CodeCheckpointTooLarge is the error code of an attempt whose handler named a
// checkpoint_file larger than the server's limit (CAIRN_MAX_CHECKPOINT_SIZE).
// Terminal: the same handler writes the same file again.
const CodeCheckpointTooLarge = "checkpoint_too_large"

// CheckpointTooLarge is the failure of a checkpoint_file (name) over limit bytes,
// read or announced by its size.
func CheckpointTooLarge(name string, limit int64) *Error {
	return &Error{
		Message: fmt.Sprintf("checkpoint_file %s is larger than the limit of %d bytes (CAIRN_MAX_CHECKPOINT_SIZE): nothing was stored", filepath.Base(name), limit),
		Code:    CodeCheckpointTooLarge,
	}
}

// controlMessage is one line on an exec handler's control descriptor. Exactly one
// field is set.
type controlMessage struct {
	Checkpoint     json.RawMessage `json:"checkpoint"`
	CheckpointFile *string         `json:"checkpoint_file"`
	Progress       json.RawMessage `json:"progress"`
	Error          *controlError   `json:"error"`
}

// controlError is the body of an {"error": …} control message.
type controlError struct {
	Message string `json:"message"`
	// Code is the handler's own class of the failure (recorded as handler_code).
	Code string `json:"code"`
	// Retryable defaults to true: only an explicit false makes the failure terminal.
	Retryable *bool `json:"retryable"`
}

// parseControlMessage decodes one control line (without its newline).
func parseControlMessage(line []byte) (*controlMessage, error) {
	var m controlMessage
	if err := json.Unmarshal(line, &m); err != nil {
		return nil, fmt.Errorf("decode control message: %w", err)
	}
	set := 0
	if m.Checkpoint != nil {
		set++
	}
	if m.CheckpointFile != nil {
		set++
		if *m.CheckpointFile == "" {
			return nil, errors.New("control message: checkpoint_file is empty")
		}
	}
	if m.Progress != nil {
		set++
	}
	if m.Error != nil {
		set++
	}
	if set != 1 {
		return nil, errors.New("control message: want exactly one of checkpoint, checkpoint_file, progress, error")
	}
	return &m, nil
}

// readControl reads newline-delimited control messages until EOF (or until the
// pipe is cut: see pipeReader) and hands them to the sink, one at a time and in
// order: a slow sink makes the handler wait on a full pipe, it loses nothing.
// Lines longer than MaxControlLine are skipped, never buffered whole. A Sink
// error wrapping ErrLeaseLost aborts the attempt.
func (r *execRun) readControl(ctx context.Context) {
	limit := r.exec.maxControlLine
	br := bufio.NewReaderSize(r.control, min(limit+1, 64<<10))
	var line []byte
	skipping := false
	lineNo := 0
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			complete := chunk[len(chunk)-1] == '\n'
			if complete {
				chunk = chunk[:len(chunk)-1]
			}
			if !skipping {
				if len(line)+len(chunk) > limit {
					lineNo++
					skipping = true
					line = line[:0]
					r.note("control message %d longer than %d bytes: skipped", lineNo, limit)
				} else {
					line = append(line, chunk...)
				}
			}
			if complete {
				if r.control.stopped() {
					// The attempt is over: lines still buffered here can change nothing.
					return
				}
				if !skipping {
					lineNo++
					if !r.handleControl(ctx, lineNo, line) {
						return
					}
				}
				skipping = false
				line = line[:0]
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			// EOF, or the read deadline: a last line without its newline counts.
			if !skipping && len(line) > 0 && errors.Is(err, io.EOF) {
				r.handleControl(ctx, lineNo+1, line)
			}
			return
		}
	}
}

// handleControl acts on one control line. It returns false when the attempt was
// aborted and reading should stop.
func (r *execRun) handleControl(ctx context.Context, lineNo int, line []byte) bool {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return true
	}
	m, err := parseControlMessage(line)
	if err != nil {
		r.note("control message %d ignored: %v", lineNo, err)
		return true
	}

	var op string
	switch {
	case m.Checkpoint != nil:
		op = "checkpoint"
		err = r.sink.Checkpoint(ctx, m.Checkpoint)
	case m.CheckpointFile != nil:
		op = "checkpoint_file"
		var f *os.File
		if f, err = r.openCheckpointFile(*m.CheckpointFile); err == nil {
			err = r.sink.CheckpointFile(ctx, f)
			f.Close()
		}
	case m.Progress != nil:
		op = "progress"
		err = r.sink.Progress(ctx, m.Progress)
	case m.Error != nil:
		msg := m.Error.Message
		if msg == "" {
			msg = "the function reported an error without a message"
		}
		r.setFunctionError(&Error{
			Message:     msg,
			Retryable:   m.Error.Retryable == nil || *m.Error.Retryable,
			Code:        CodeFunctionError,
			HandlerCode: handlerCode(m.Error.Code),
		})
		return true
	}
	if err == nil {
		return true
	}
	if errors.Is(err, ErrLeaseLost) {
		r.abort(err)
		return false
	}
	if fe := (*Error)(nil); errors.As(err, &fe) {
		// The sink refused what the handler sent (a checkpoint_file over the
		// limit): the attempt fails with it.
		r.note("control message %d (%s) refused: %s", lineNo, op, fe.Message)
		r.abort(fe)
		return false
	}
	if ctx.Err() != nil {
		// The attempt is being stopped; Invoke reports ctx's cause.
		return true
	}
	// A checkpoint that could not be stored costs progress on a retry, not
	// correctness: note it where the function's author will look, and go on.
	r.note("control message %d (%s) failed: %v", lineNo, op, err)
	r.logger.WarnContext(ctx, "exec control message failed", "op", op, "error", err)
	return true
}

// How a pipeReader was cut. The supervisor only ever raises it.
const (
	// pipeOpen: read to EOF.
	pipeOpen int32 = iota
	// pipeCutHeld: a process outside the handler's group holds the pipe open.
	// What the pipe holds when the reader notices the cut is still read (it
	// includes everything the handler wrote before it exited); then reading stops.
	pipeCutHeld
	// pipeCutNow: the attempt is over; reading stops at once.
	pipeCutNow
)

// errPipeCut ends the reading of a pipe that was cut.
var errPipeCut = errors.New("exec pipe cut")

// pipeReader is the parent's end of a handler's stdout, stderr or control pipe.
// Exactly one goroutine reads it; the supervisor may cut it (cutOff) and ask
// whether some process still holds its write end (hasWriter) meanwhile.
type pipeReader struct {
	f    *os.File
	name string
	cut  atomic.Int32

	// Owned by the reading goroutine: after a pipeCutHeld, how much is left of
	// what the pipe held when the cut was noticed.
	draining bool
	left     int
}

func newPipeReader(f *os.File, name string) *pipeReader {
	return &pipeReader{f: f, name: name}
}

// Read reads the pipe like os.File.Read until it is cut; it then returns
// errPipeCut (or os.ErrDeadlineExceeded), after what a pipeCutHeld keeps.
func (p *pipeReader) Read(b []byte) (int, error) {
	for {
		if p.draining {
			if p.left == 0 || p.stopped() {
				return 0, errPipeCut
			}
			// Never blocks: the pipe holds at least p.left bytes, and we are its
			// only reader.
			n, err := p.f.Read(b[:min(len(b), p.left)])
			p.left -= n
			return n, err
		}
		n, err := p.f.Read(b)
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return n, err
		}
		if p.cut.Load() != pipeCutHeld {
			return n, errPipeCut
		}
		// The deadline that woke us makes Read fail without looking at what the
		// pipe holds: the handler's last lines may be in it. Keep what is there
		// now, not what the process holding the pipe writes from now on.
		left, qerr := p.buffered()
		if qerr != nil || p.f.SetReadDeadline(time.Time{}) != nil {
			return n, errPipeCut
		}
		p.draining, p.left = true, left
		if n > 0 {
			return n, nil
		}
	}
}

// stopped reports whether the pipe was cut with pipeCutNow.
func (p *pipeReader) stopped() bool {
	return p.cut.Load() == pipeCutNow
}

// cutOff cuts the pipe (pipeCutHeld or pipeCutNow): a Read blocked on it
// returns, and so does the next one. Only the supervisor calls it.
func (p *pipeReader) cutOff(how int32) {
	if how <= p.cut.Load() {
		return
	}
	p.cut.Store(how)
	_ = p.f.SetReadDeadline(time.Now())
}

// hasWriter reports whether some process still holds the pipe's write end.
// Linux's poll reports POLLHUP on a pipe's read end as soon as no writer is
// left, even while data remains to be read (fs/pipe.c, pipe_poll). The check
// goes through RawConn.Control: File.Fd would switch the pipe to blocking mode
// and make deadlines useless. When it cannot tell, it says true.
func (p *pipeReader) hasWriter() bool {
	rc, err := p.f.SyscallConn()
	if err != nil {
		return true
	}
	var revents int16
	var perr error
	err = rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			_, perr = unix.Poll(fds, 0)
			if !errors.Is(perr, unix.EINTR) {
				break
			}
		}
		revents = fds[0].Revents
	})
	if err != nil || perr != nil {
		return true
	}
	return revents&unix.POLLHUP == 0
}

// buffered returns how many bytes the pipe holds (FIONREAD, which x/sys/unix
// calls TIOCINQ on Linux).
func (p *pipeReader) buffered() (int, error) {
	rc, err := p.f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var ierr error
	if err := rc.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), unix.TIOCINQ) }); err != nil {
		return 0, err
	}
	return n, ierr
}

// note writes a line of Cairn's own into the attempt's log.
func (r *execRun) note(format string, args ...any) {
	_ = r.logW.write([]byte("cairn: " + fmt.Sprintf(format, args...) + "\n"))
}

// lockedLog serialises writes to a Sink's log: the stderr copy and the control
// reader's notes come from different goroutines. After the first failed write
// the log is abandoned (stderr's tail is still kept for the failure message).
type lockedLog struct {
	sink   Sink
	logger *slog.Logger

	mu     sync.Mutex
	w      io.Writer
	failed bool
}

func (l *lockedLog) write(p []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failed {
		return nil
	}
	if l.w == nil {
		l.w = l.sink.Log()
	}
	if _, err := l.w.Write(p); err != nil {
		l.failed = true
		l.logger.Warn("write exec log; dropping the rest", "error", err)
		return err
	}
	return nil
}

// tailBuffer keeps the last size bytes written to it. It is safe for
// concurrent use.
type tailBuffer struct {
	mu   sync.Mutex
	buf  []byte
	next int  // where the next byte goes
	full bool // buf has wrapped at least once
}

func newTailBuffer(size int) *tailBuffer {
	return &tailBuffer{buf: make([]byte, size)}
}

// Write never fails.
func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if len(p) >= len(t.buf) {
		copy(t.buf, p[len(p)-len(t.buf):])
		t.next, t.full = 0, true
		return n, nil
	}
	c := copy(t.buf[t.next:], p)
	if c < len(p) {
		copy(t.buf, p[c:])
		t.full = true
	}
	t.next = (t.next + len(p)) % len(t.buf)
	if t.next == 0 && len(p) > 0 {
		t.full = true
	}
	return n, nil
}

// String returns the tail as trimmed valid UTF-8, starting with "…" when bytes
// were dropped.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	var b []byte
	if t.full {
		b = append(append(b, t.buf[t.next:]...), t.buf[:t.next]...)
	} else {
		b = append(b, t.buf[:t.next]...)
	}
	full := t.full
	t.mu.Unlock()

	if full {
		// Do not start in the middle of a character.
		for i := 0; i < utf8.UTFMax && len(b) > 0 && !utf8.RuneStart(b[0]); i++ {
			b = b[1:]
		}
	}
	s := strings.TrimSpace(strings.ToValidUTF8(string(b), "\uFFFD"))
	if full && s != "" {
		s = "…" + s
	}
	return s
}

// openCheckpointFile opens the file a checkpoint_file message names. The path is
// the handler's, but the server opens it: it must lie inside the handler's own
// directories (its TMPDIR and HOME, or the bundle, where relative paths start),
// and is opened through an os.Root, so that neither "..", nor an absolute path,
// nor a symbolic link makes the server read one of its own files (its
// /proc/self/environ, its credentials) on the handler's behalf. Only regular
// files: a FIFO would block this reader for good, a device may never end.
func (r *execRun) openCheckpointFile(name string) (*os.File, error) {
	if !filepath.IsAbs(name) {
		name = filepath.Join(r.bundleDir, name)
	}
	name = filepath.Clean(name)
	for _, dir := range append([]string{r.bundleDir}, r.workDirs...) {
		rel, err := filepath.Rel(dir, name)
		if err != nil || !filepath.IsLocal(rel) {
			continue
		}
		root, err := os.OpenRoot(dir)
		if err != nil {
			return nil, err
		}
		defer root.Close()
		// O_NONBLOCK: opening a FIFO for reading must not wait for a writer.
		f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			return nil, err
		}
		if info, err := f.Stat(); err != nil || !info.Mode().IsRegular() {
			f.Close()
			return nil, fmt.Errorf("%s is not a regular file", name)
		}
		return f, nil
	}
	return nil, fmt.Errorf("%s is outside the handler's TMPDIR, HOME and bundle", name)
}
