package blobstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/minio/minio-go/v7"
)

// putOwn stores content (PutOptions.Index) that did not end within small
// (read and hashed already) under a fresh key of its own, as a multipart upload
// (uploadStream); settle then finds the content stored already or records the
// new object. Content that ends within its first part is put at its content
// address from memory instead (putSmall).
//
// Crash safety: until the upload completes, a crash leaves an incomplete upload,
// which CleanTemp aborts; once it completes, an object no row names, which the
// collector deletes (maintenance.Collector). A failed or canceled Put removes
// both itself.
func (s *S3Store) putOwn(ctx context.Context, kind string, hr *hashingReader, src io.Reader, small []byte, opts PutOptions) (Object, error) {
	key, err := newUniqueKey(kind)
	if err != nil {
		return Object{}, err
	}
	ct := contentType(opts.ContentType)
	bp := s.parts.Get().(*[]byte)
	var whole []byte // the content, when it ended within the first part
	err = s.upload(ctx, key, minio.PutObjectOptions{ContentType: ct}, func(uploadID string) ([]minio.CompletePart, error) {
		parts, first, err := s.uploadStream(ctx, key, uploadID, src, small, *bp)
		if err == nil && first != nil {
			whole = first
			return nil, errWholeInFirstPart // aborts the upload
		}
		return parts, err
	})
	if whole != nil {
		obj, err := s.putSmall(ctx, kind, hr, whole, opts)
		if err == nil {
			s.parts.Put(bp)
		}
		return obj, err
	}
	if err != nil {
		return Object{}, err
	}
	// Only after a success: a request that failed may still be read by the
	// HTTP transport after it returned.
	s.parts.Put(bp)
	obj, err := s.settle(ctx, kind, key, hr, ct, opts)
	if err != nil || obj.Key != key {
		// Failed, or the content was stored already: ours goes.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s3CleanupTimeout)
		defer cancel()
		_ = s.client.RemoveObject(cctx, s.bucket, key, minio.RemoveObjectOptions{}) // best effort
	}
	return obj, err
}

// errWholeInFirstPart ends an upload whose content ended within its first part.
var errWholeInFirstPart = errors.New("the content ended within its first part")

// uploadStream uploads the parts of uploadID, each of the part size but the
// last, from small and then src, in buf (one part long): each part is uploaded
// as it is read, its request reading buf behind the reader, so that reading
// and hashing overlap the upload in one part of memory. A part's length is
// only known at its end: each is sent as a full part, and when src ends within
// it, that request is abandoned and the part sent again with its true length
// from buf. When src ends within the first part, nothing is uploaded and first
// is the whole content.
func (s *S3Store) uploadStream(ctx context.Context, key, uploadID string, src io.Reader, small, buf []byte) (parts []minio.CompletePart, first []byte, err error) {
	filled := copy(buf, small)
	for number := 1; ; number++ {
		if number > s3MaxParts {
			return nil, nil, fmt.Errorf("content exceeds %d parts of %d bytes", s3MaxParts, s.partSize)
		}
		ps := &partStream{buf: buf, n: filled}
		ps.cond.L = &ps.mu
		uctx, cancel := context.WithCancel(ctx)
		sent := make(chan error, 1)
		var part minio.CompletePart
		go func() {
			var err error
			part, err = s.uploadPart(uctx, key, uploadID, number, ps, int64(len(buf)))
			sent <- err
		}()
		n, rerr := ps.fill(ctxReader{ctx: ctx, r: src})
		filled = 0
		if rerr != nil || n < len(buf) {
			// src failed or ended: abandon the request that waits for a full part.
			ps.abort()
			cancel()
			<-sent
			switch {
			case rerr != nil:
				return nil, nil, fmt.Errorf("read content: %w", rerr)
			case number == 1:
				return nil, buf[:n], nil
			case n == 0:
				return parts, nil, nil // the previous part ended exactly at the end
			}
			p, err := s.uploadPart(ctx, key, uploadID, number, bytes.NewReader(buf[:n]), int64(n))
			if err != nil {
				return nil, nil, err
			}
			return append(parts, p), nil, nil
		}
		err := <-sent
		cancel()
		if err != nil {
			return nil, nil, err
		}
		parts = append(parts, part)
	}
}

// partStream is the body of one part's request: it reads buf as the reader
// fills it (fill), so that the upload follows the reading.
type partStream struct {
	buf     []byte
	mu      sync.Mutex
	cond    sync.Cond
	n       int  // bytes of buf filled
	off     int  // bytes of buf read by the request
	ended   bool // fill is done
	aborted bool // the request is to fail
}

// errPartAbandoned fails a part's request whose content ended short of it.
var errPartAbandoned = errors.New("part abandoned: the content ended within it")

func (p *partStream) Read(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.off == p.n && !p.ended && !p.aborted {
		p.cond.Wait()
	}
	if p.aborted {
		return 0, errPartAbandoned
	}
	if p.off == p.n {
		return 0, io.EOF
	}
	k := copy(b, p.buf[p.off:p.n])
	p.off += k
	return k, nil
}

// WriteTo writes what is filled as it is filled, in the largest pieces at
// hand: the HTTP transport copies the body with it (io.Copy), in a few large
// writes rather than many of its buffer's size.
func (p *partStream) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for {
		p.mu.Lock()
		for p.off == p.n && !p.ended && !p.aborted {
			p.cond.Wait()
		}
		off, n, aborted := p.off, p.n, p.aborted
		p.mu.Unlock()
		if aborted {
			return total, errPartAbandoned
		}
		if off == n {
			return total, nil
		}
		k, err := w.Write(p.buf[off:n])
		total += int64(k)
		p.mu.Lock()
		p.off += k
		p.mu.Unlock()
		if err != nil {
			return total, err
		}
	}
}

// fill reads r into buf after what is filled already until buf is full or r
// ends, publishing each read to the request, and returns the bytes filled.
func (p *partStream) fill(r io.Reader) (int, error) {
	n := p.n
	var err error
	for n < len(p.buf) {
		var k int
		k, err = r.Read(p.buf[n:min(len(p.buf), n+s3SmallRead)])
		n += k
		p.mu.Lock()
		p.n = n
		p.mu.Unlock()
		p.cond.Broadcast()
		if err == io.EOF {
			err = nil
			break
		}
		if err != nil {
			break
		}
	}
	p.mu.Lock()
	p.ended = true
	p.mu.Unlock()
	p.cond.Broadcast()
	return n, err
}

// abort fails the request's next read.
func (p *partStream) abort() {
	p.mu.Lock()
	p.aborted = true
	p.mu.Unlock()
	p.cond.Broadcast()
}

// settle names the content of key, a completed upload of hr's content, and
// returns the object that is to hold it, claimed (PutOptions.Claim): the same
// content stored already, where opts.Index records it or at its content
// address, or else key itself, once it is claimed, found still there and
// recorded in opts.Index.
func (s *S3Store) settle(ctx context.Context, kind, key string, hr *hashingReader, ct string, opts PutOptions) (Object, error) {
	sum, err := hr.finish()
	if err != nil {
		return Object{}, err
	}
	address, err := KeyFor(kind, sum)
	if err != nil {
		return Object{}, err
	}
	recorded, err := opts.Index.BlobLookup(ctx, address)
	if err != nil {
		return Object{}, fmt.Errorf("look up %s: %w", address, err)
	}
	for _, k := range []string{recorded, address} {
		if k == "" || k == key {
			continue
		}
		if err := opts.claim(ctx, k); err != nil {
			return Object{}, err
		}
		obj, err := s.stat(ctx, k)
		if err == nil {
			obj.Digest, obj.SHA256 = sum, sum
			return obj, nil
		}
		if !errors.Is(err, ErrNotFound) {
			return Object{}, err
		}
		// Collected since it was recorded: look on.
	}
	if err := opts.claim(ctx, key); err != nil {
		return Object{}, err
	}
	// The claim keeps the object from now on; before it, an upload longer than
	// the collector's grace may have lost it.
	if _, err := s.stat(ctx, key); err != nil {
		return Object{}, fmt.Errorf("check %s after its upload: %w", key, err)
	}
	if err := opts.Index.BlobRecord(ctx, address, key); err != nil {
		return Object{}, fmt.Errorf("record %s as %s: %w", key, address, err)
	}
	return Object{Key: key, Digest: sum, SHA256: sum, Size: hr.n, ContentType: ct}, nil
}
