package blobstore

import (
	"errors"
	"io"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

const (
	// spoolPieces is how many pieces of s3SmallRead spooling holds at once: one
	// being read, and the others being written and hashed beside it.
	spoolPieces = 4
	// spoolAlign is the alignment of direct I/O: the buffers' addresses, the
	// lengths and the file offsets.
	spoolAlign = 4096
)

// spoolFile is an unlinked file that holds a Put's content while it is hashed,
// until it is uploaded. It is written and read with direct I/O where the
// filesystem allows it (Linux, O_DIRECT), so that an output of gigabytes
// neither fills the page cache, pushing out the pages of the database beside
// it, nor leaves gigabytes of dirty pages to write back; memory is the pieces'
// buffers only. Elsewhere, and for a last piece that is not a whole number of
// blocks, the writes go through the page cache.
type spoolFile struct {
	f *os.File
	// mu guards direct: parts of one spool are read at once (putSpooled).
	mu     sync.Mutex
	direct bool
}

// newSpoolFile creates a spool file in dir and unlinks it at once: the
// descriptor keeps it until close, and a crash leaves nothing behind.
func newSpoolFile(dir string) (*spoolFile, error) {
	f, err := os.CreateTemp(dir, "cairn-spool-*")
	if err != nil {
		return nil, err
	}
	_ = os.Remove(f.Name())
	return &spoolFile{f: f, direct: setDirectIO(f, true)}, nil
}

func (s *spoolFile) Close() error { return s.f.Close() }

// write appends p, an aligned buffer (alignedBuffer); every write but the
// last is a whole number of blocks.
func (s *spoolFile) write(p []byte) error {
	if s.direct && len(p)%spoolAlign != 0 {
		// The last piece: its tail is not a whole block.
		s.direct = !setDirectIO(s.f, false)
	}
	n, err := s.f.Write(p)
	if errors.Is(err, syscall.EINVAL) && s.direct && n == 0 {
		// The filesystem took O_DIRECT but refuses this write.
		s.direct = !setDirectIO(s.f, false)
		_, err = s.f.Write(p)
	}
	return err
}

// reader returns a reader of the spool's bytes from off to off+n, that can
// seek back within them (a retried request sends its body again). It reads
// through buf, an aligned buffer, direct when it can.
func (s *spoolFile) reader(off, n int64, buf []byte) *spoolReader {
	s.mu.Lock()
	if !s.direct {
		s.direct = setDirectIO(s.f, true)
	}
	s.mu.Unlock()
	return &spoolReader{s: s, start: off, end: off + n, pos: off, buf: buf}
}

// spoolReader reads a section of a spool file through an aligned buffer.
type spoolReader struct {
	s               *spoolFile
	start, end, pos int64
	buf             []byte
	bufOff          int64 // file offset of buf[0]
	bufLen          int   // valid bytes in buf; 0 when empty
}

func (r *spoolReader) Read(p []byte) (int, error) {
	if r.pos >= r.end {
		return 0, io.EOF
	}
	if r.pos < r.bufOff || r.pos >= r.bufOff+int64(r.bufLen) {
		if err := r.fill(); err != nil {
			return 0, err
		}
	}
	avail := r.buf[r.pos-r.bufOff : r.bufLen]
	if left := r.end - r.pos; int64(len(avail)) > left {
		avail = avail[:left]
	}
	n := copy(p, avail)
	r.pos += int64(n)
	return n, nil
}

// fill reads the aligned block of the file around pos into buf.
func (r *spoolReader) fill() error {
	off := r.pos &^ (spoolAlign - 1)
	n, err := r.s.f.ReadAt(r.buf, off)
	if errors.Is(err, syscall.EINVAL) && n == 0 {
		r.s.mu.Lock()
		if r.s.direct {
			r.s.direct = !setDirectIO(r.s.f, false)
		}
		r.s.mu.Unlock()
		n, err = r.s.f.ReadAt(r.buf, off)
	}
	if err == io.EOF && off+int64(n) > r.pos {
		err = nil
	}
	if err != nil {
		return err
	}
	r.bufOff, r.bufLen = off, n
	return nil
}

func (r *spoolReader) Seek(offset int64, whence int) (int64, error) {
	var abs int64
	switch whence {
	case io.SeekStart:
		abs = r.start + offset
	case io.SeekCurrent:
		abs = r.pos + offset
	case io.SeekEnd:
		abs = r.end + offset
	default:
		return 0, errors.New("spool: invalid whence")
	}
	if abs < r.start {
		return 0, errors.New("spool: negative position")
	}
	r.pos = abs
	return abs - r.start, nil
}

// spoolPool holds aligned pieces of s3SmallRead bytes (*[]byte), for spooling
// and for reading the spool back, so that each Put over a megabyte does not
// allocate five of them.
var spoolPool = sync.Pool{New: func() any {
	b := alignedBuffer(s3SmallRead)
	return &b
}}

// alignedBuffer returns n bytes whose address is a multiple of spoolAlign.
func alignedBuffer(n int) []byte {
	b := make([]byte, n+spoolAlign)
	skip := (spoolAlign - int(uintptr(unsafe.Pointer(&b[0]))%spoolAlign)) % spoolAlign
	return b[skip : skip+n : skip+n]
}
