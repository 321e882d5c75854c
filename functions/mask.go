package functions

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"slices"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
)

// Mask replaces a secret value in what a handler produces.
const Mask = "***"

// Masker replaces known secret values with Mask, longest first: each value as it
// is, and as it appears inside a JSON string however its characters are escaped
// (`\/` as PHP writes it, `\u00e9` as Python's json.dumps does, `\u0061` for
// any character): the text is compared with the values as a JSON decoder would
// read it, so that what PostgreSQL's jsonb decodes (and viewers get back) is never
// a value. A nil *Masker (no secrets) changes nothing.
type Masker struct {
	needles [][]byte
	longest int
	// first marks the bytes a value may start with, as it is or escaped ('\').
	first [256]bool
}

// maxEscape is how many bytes of JSON text one byte of a value takes at most:
// \u00XX for one byte.
const maxEscape = 6

// NewMasker returns a masker of the non-empty values, or nil when there are none.
func NewMasker(values []string) *Masker {
	var needles [][]byte
	for _, v := range values {
		if v == "" || slices.ContainsFunc(needles, func(n []byte) bool { return string(n) == v }) {
			continue
		}
		needles = append(needles, []byte(v))
	}
	if len(needles) == 0 {
		return nil
	}
	slices.SortFunc(needles, func(a, b []byte) int { return len(b) - len(a) })
	m := &Masker{needles: needles, longest: len(needles[0])}
	m.first['\\'] = true
	for _, n := range needles {
		m.first[n[0]] = true
	}
	return m
}

// Bytes returns b with every secret value masked (b itself when there is none).
// b is the whole text: nothing follows it.
func (m *Masker) Bytes(b []byte) []byte {
	return m.mask(b, true)
}

// mask masks b; final says nothing follows b (else a value may end in what comes
// next, and an escape cut short by b's end is left to the next call).
func (m *Masker) mask(b []byte, final bool) []byte {
	if m == nil {
		return b
	}
	for _, n := range m.needles {
		if bytes.Contains(b, n) {
			b = bytes.ReplaceAll(b, n, []byte(Mask))
		}
	}
	if bytes.IndexByte(b, '\\') < 0 {
		return b // no escape: the values as they are were all there is
	}
	return m.escaped(b, final)
}

// escaped masks the values written with JSON escapes.
func (m *Masker) escaped(b []byte, final bool) []byte {
	var out []byte // nil until a value is found
	done := 0      // b[:done] is in out
	bs := -1       // the first backslash at or after i, once looked for
	for i := 0; i < len(b); {
		// A value written with an escape has one within its first len(value)
		// bytes (before it, its bytes are as they are): far from the next
		// backslash, none starts.
		if bs < i {
			if bs = bytes.IndexByte(b[i:], '\\'); bs < 0 {
				break
			}
			bs += i
		}
		if bs-i >= m.longest {
			i = bs - m.longest + 1
		}
		if !m.first[b[i]] {
			i++
			continue
		}
		end := -1
		for _, n := range m.needles {
			if e, _ := matchJSON(b, i, n, final); e >= 0 {
				end = e
				break
			}
		}
		if end < 0 {
			i++
			continue
		}
		out = append(append(out, b[done:i]...), Mask...)
		i, done = end, end
	}
	if out == nil {
		return b
	}
	return append(out, b[done:]...)
}

// matchJSON compares b from i with the value n, reading JSON escapes in b as
// their characters (a backslash that starts no escape is itself). It returns where
// the value ends in b, or -1; more is true when b ends before the comparison
// could be decided (a value may start at i and go on in the next write). When b
// is final (nothing comes after it), an escape cut short by its end is read as
// the characters it is made of, as a JSON reader of the text would.
func matchJSON(b []byte, i int, n []byte, final bool) (end int, more bool) {
	k := 0
	var unit [utf8.UTFMax]byte
	for k < len(n) {
		if i >= len(b) {
			return -1, true
		}
		c := b[i]
		if c != '\\' {
			if c != n[k] {
				return -1, false
			}
			i, k = i+1, k+1
			continue
		}
		r, w, ok := decodeEscape(b[i:])
		switch {
		case w == 0 && !final:
			return -1, true // an escape cut short by the end of b
		case !ok:
			if n[k] != '\\' {
				return -1, false
			}
			i, k = i+1, k+1
			continue
		}
		u := unit[:utf8.EncodeRune(unit[:], r)]
		if !bytes.HasPrefix(n[k:], u) {
			return -1, false
		}
		i, k = i+w, k+len(u)
	}
	return i, false
}

// decodeEscape reads the JSON escape at the start of b (b[0] is a backslash): its
// character and width. ok is false when b holds no escape there (the backslash is
// itself); w is 0 when b ends before the escape does.
func decodeEscape(b []byte) (r rune, w int, ok bool) {
	if len(b) < 2 {
		return 0, 0, false
	}
	switch b[1] {
	case '"', '\\', '/':
		return rune(b[1]), 2, true
	case 'b':
		return '\b', 2, true
	case 'f':
		return '\f', 2, true
	case 'n':
		return '\n', 2, true
	case 'r':
		return '\r', 2, true
	case 't':
		return '\t', 2, true
	case 'u':
	default:
		return 0, 1, false
	}
	if len(b) < 6 {
		if !isHex(b[2:]) {
			return 0, 1, false
		}
		return 0, 0, false
	}
	if !isHex(b[2:6]) {
		return 0, 1, false
	}
	r = hexRune(b[2:6])
	if !utf16.IsSurrogate(r) {
		return r, 6, true
	}
	// A surrogate pair is one character: \ud83d\ude00.
	if len(b) < 12 {
		if len(b) == 6 || b[6] == '\\' && (len(b) == 7 || b[7] == 'u' && isHex(b[8:])) {
			return 0, 0, false
		}
		return utf8.RuneError, 6, true
	}
	if b[6] == '\\' && b[7] == 'u' && isHex(b[8:12]) {
		if pair := utf16.DecodeRune(r, hexRune(b[8:12])); pair != utf8.RuneError {
			return pair, 12, true
		}
	}
	return utf8.RuneError, 6, true
}

func isHex(b []byte) bool {
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// hexRune reads 4 hex digits (checked by isHex).
func hexRune(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case c <= '9':
			c -= '0'
		case c <= 'F':
			c -= 'A' - 10
		default:
			c -= 'a' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// String returns s with every secret value masked.
func (m *Masker) String(s string) string {
	if m == nil {
		return s
	}
	return string(m.Bytes([]byte(s)))
}

// partial is the length of the longest end of b that may start a value, as it
// is or escaped: what a writer holds back, in case the rest of the value comes
// next.
func (m *Masker) partial(b []byte) int {
	for p := max(0, len(b)-m.longest*maxEscape); p < len(b); p++ {
		end := b[p:]
		for _, n := range m.needles {
			if len(n) > len(end) && bytes.HasPrefix(n, end) {
				return len(end)
			}
			if m.first[b[p]] {
				if _, more := matchJSON(b, p, n, false); more {
					return len(end)
				}
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
	buf := p // Bytes never writes to its argument
	if len(mw.pending) > 0 {
		buf = append(mw.pending, p...)
	}
	buf = mw.m.mask(buf, false)
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
