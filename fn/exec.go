package fn

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
)

// maxControlLine is how long a control message may be before SaveCheckpoint
// sends it as a checkpoint_file instead: under the server's default limit of
// one line (1 MiB, functions.DefaultMaxControlLine).
const maxControlLine = 512 << 10

// RunExec runs one exec attempt: the envelope from stdin, the output to
// stdout, control messages to the descriptor CAIRN_CONTROL_FD names (3), the
// log to stderr. It returns the process's exit status: 0 on success, 1 when
// the handler failed (the failure was sent on fd 3 and written to stderr).
// SIGTERM (Cairn's timeout or cancel) cancels ctx.
func RunExec(ctx context.Context, h Handler, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	ch := newExecChannel(stderr)
	defer ch.close()
	var env Envelope
	if err := json.NewDecoder(stdin).Decode(&env); err != nil {
		fail := Terminal("protocol", "read the envelope from stdin: %v", err)
		ch.fail(fail)
		return 1
	}
	c := newCall(env, KindExec, ch, logger)
	out, fail := invoke(ctx, h, c)
	if fail != nil {
		ch.fail(fail)
		return 1
	}
	w := bufio.NewWriterSize(stdout, 64<<10)
	err := out.write(w)
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		ch.fail(Retryable("output", "write the output: %v", err))
		return 1
	}
	return 0
}

// execChannel writes control messages to fd 3 (or, when the handler runs
// outside Cairn without one, to stderr, for whoever runs it by hand).
type execChannel struct {
	mu     sync.Mutex
	w      io.Writer
	f      *os.File
	stderr io.Writer
}

func newExecChannel(stderr io.Writer) *execChannel {
	ch := &execChannel{stderr: stderr}
	if fd, err := strconv.Atoi(os.Getenv("CAIRN_CONTROL_FD")); err == nil && fd > 2 {
		ch.f = os.NewFile(uintptr(fd), "cairn-control")
	}
	if ch.f != nil {
		ch.w = ch.f
	} else {
		ch.w = prefixWriter{w: stderr, prefix: "cairn control (no CAIRN_CONTROL_FD): "}
	}
	return ch
}

func (ch *execChannel) close() {
	if ch.f != nil {
		ch.f.Close()
	}
}

// send writes one control message as one line.
func (ch *execChannel) send(key string, value any) error {
	b, err := json.Marshal(map[string]any{key: value})
	if err != nil {
		return err
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	_, err = ch.w.Write(append(b, '\n'))
	return err
}

func (ch *execChannel) checkpoint(_ context.Context, value []byte) error {
	if len(value) < maxControlLine {
		return ch.send("checkpoint", json.RawMessage(value))
	}
	// Too long for one control line: a file in the attempt's TMPDIR, whose
	// bytes the server stores (and removes with TMPDIR).
	f, err := os.CreateTemp("", "cairn-checkpoint-*.json")
	if err != nil {
		return fmt.Errorf("write a checkpoint_file: %w", err)
	}
	_, err = f.Write(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write a checkpoint_file: %w", err)
	}
	path, err := filepath.Abs(f.Name())
	if err != nil {
		return err
	}
	// The server reads the file when it handles the line; a newer checkpoint
	// gets a file of its own, so this one is never rewritten under it.
	return ch.send("checkpoint_file", path)
}

func (ch *execChannel) progress(_ context.Context, value []byte) error {
	return ch.send("progress", json.RawMessage(value))
}

// fail reports the failure on fd 3 and in the log.
func (ch *execChannel) fail(e *Error) {
	if err := ch.send("error", e); err != nil {
		fmt.Fprintf(ch.stderr, "cairn: report the failure: %v\n", err)
	}
	fmt.Fprintf(ch.stderr, "cairn: %s\n", e.Error())
}

// prefixWriter writes each Write's bytes after a prefix.
type prefixWriter struct {
	w      io.Writer
	prefix string
}

func (p prefixWriter) Write(b []byte) (int, error) {
	if _, err := io.WriteString(p.w, p.prefix); err != nil {
		return 0, err
	}
	return p.w.Write(b)
}

// ErrLeaseLost is wrapped by SaveCheckpoint's error when Cairn refused the
// checkpoint because the attempt no longer holds its step (http, lambda: 409):
// stop working, another attempt has the step.
var ErrLeaseLost = errors.New("lease lost")
