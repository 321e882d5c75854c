package functions

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"slices"
	"sync"
)

// Mask replaces a secret value in what a handler produces.
const Mask = "***"

// Masker replaces known secret values with Mask: each value as it is and as it
// appears inside a JSON string (escaped), longest first. A nil *Masker (no
// secrets) changes nothing.
type Masker struct {
	needles [][]byte
	longest int
}

// NewMasker returns a masker of the non-empty values, or nil when there are none.
func NewMasker(values []string) *Masker {
	var needles [][]byte
	for _, v := range values {
		if v == "" {
			continue
		}
		needles = append(needles, []byte(v))
		if q, err := json.Marshal(v); err == nil {
			if esc := q[1 : len(q)-1]; !bytes.Equal(esc, []byte(v)) {
				needles = append(needles, esc)
			}
		}
	}
	if len(needles) == 0 {
		return nil
	}
	slices.SortFunc(needles, func(a, b []byte) int { return len(b) - len(a) })
	return &Masker{needles: needles, longest: len(needles[0])}
}

// Bytes returns b with every secret value masked (b itself when there is none).
func (m *Masker) Bytes(b []byte) []byte {
	if m == nil {
		return b
	}
	for _, n := range m.needles {
		if bytes.Contains(b, n) {
			b = bytes.ReplaceAll(b, n, []byte(Mask))
		}
	}
	return b
}

// String returns s with every secret value masked.
func (m *Masker) String(s string) string {
	if m == nil {
		return s
	}
	return string(m.Bytes([]byte(s)))
}

// partial is the length of the longest end of b that starts a value (shorter than
// it): what a writer holds back, in case the rest of the value comes next.
func (m *Masker) partial(b []byte) int {
	for k := min(len(b), m.longest-1); k > 0; k-- {
		end := b[len(b)-k:]
		for _, n := range m.needles {
			if len(n) > k && bytes.HasPrefix(n, end) {
				return k
			}
		}
	}
	return 0
}

// Writer returns a writer that masks what goes through it to w. It holds back
// the last bytes written that could start a value (fewer than the longest) until
// more come or Flush is called, so that a value split between writes is masked
// too, and what cannot be a value's start is not delayed (a live log shows it).
func (m *Masker) Writer(w io.Writer) *MaskWriter {
	return &MaskWriter{m: m, w: w}
}

// MaskWriter is Masker.Writer's writer. It is safe for concurrent use.
type MaskWriter struct {
	m       *Masker
	w       io.Writer
	mu      sync.Mutex
	pending []byte
	err     error
}

// Write masks p and writes all of it but a possible start of a secret value.
func (mw *MaskWriter) Write(p []byte) (int, error) {
	if mw.m == nil {
		return mw.w.Write(p)
	}
	mw.mu.Lock()
	defer mw.mu.Unlock()
	if mw.err != nil {
		return 0, mw.err
	}
	buf := mw.m.Bytes(append(mw.pending, p...))
	keep := mw.m.partial(buf)
	out := buf[:len(buf)-keep]
	mw.pending = append([]byte(nil), buf[len(buf)-keep:]...)
	if len(out) > 0 {
		if _, err := mw.w.Write(out); err != nil {
			mw.err = err
			return 0, err
		}
	}
	return len(p), nil
}

// Flush writes what was held back.
func (mw *MaskWriter) Flush() error {
	if mw.m == nil {
		return nil
	}
	mw.mu.Lock()
	defer mw.mu.Unlock()
	if mw.err != nil || len(mw.pending) == 0 {
		return mw.err
	}
	_, err := mw.w.Write(mw.m.Bytes(mw.pending))
	mw.pending = nil
	if err != nil {
		mw.err = err
	}
	return err
}

// MaskSink wraps a Sink so that the output, the log, and inline checkpoints and
// progress reports are masked. Call Flush when the handler is done, before the
// output is read.
type MaskSink struct {
	Sink
	m           *Masker
	out, logOut *MaskWriter
}

// NewMaskSink returns sink masked by m (sink itself, wrapped, when m is nil).
func NewMaskSink(sink Sink, m *Masker) *MaskSink {
	return &MaskSink{Sink: sink, m: m, out: m.Writer(sink.Output()), logOut: m.Writer(sink.Log())}
}

// Output is the masked output.
func (s *MaskSink) Output() io.Writer { return s.out }

// Log is the masked log.
func (s *MaskSink) Log() io.Writer { return s.logOut }

// Checkpoint stores a masked checkpoint.
func (s *MaskSink) Checkpoint(ctx context.Context, value json.RawMessage) error {
	return s.Sink.Checkpoint(ctx, s.m.Bytes(value))
}

// Progress records a masked progress report.
func (s *MaskSink) Progress(ctx context.Context, value json.RawMessage) error {
	return s.Sink.Progress(ctx, s.m.Bytes(value))
}

// Flush writes what the output and the log held back. It returns the output's
// error, if any (a log that fails is not the attempt's failure).
func (s *MaskSink) Flush() error {
	_ = s.logOut.Flush()
	return s.out.Flush()
}
