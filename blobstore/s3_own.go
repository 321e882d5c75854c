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

// s3OwnFree is how many part buffers of finished Puts under keys of their own
// (putOwn) an S3Store keeps for the next ones; more are released.
//
// A Put under a key of its own holds one part (S3Config.PartSize), and more
// only past 1,000 parts (ownPartSize).
const s3OwnFree = 2

// putOwn stores content (PutOptions.Index) of unknown size, or larger than
// s3SmallRead, under a fresh key of its own, as a multipart upload
// (uploadStream); settle then finds the content stored already or records the
// new object. Content that ends within its first s3SmallRead bytes, or within
// its first part, is put at its content address from memory instead
// (putSmall). Memory: one part, outside the Go heap on Linux (allocPart), which
// the start of the content is read into too.
//
// Crash safety: until the upload completes, a crash leaves an incomplete upload,
// which CleanTemp aborts; once it completes, an object no row names, which the
// collector deletes (maintenance.Collector). A failed or canceled Put removes
// both itself.
func (s *S3Store) putOwn(ctx context.Context, kind string, hr *hashingReader, src io.Reader, opts PutOptions) (Object, error) {
	// Every request reads buf through a partStream, revoked once the request
	// returns: buf is free again when uploadStream returns, failed or not.
	buf := s.takePart()
	defer s.givePart(buf)
	filled, err := readFull(src, buf[:s3SmallRead])
	if err != nil {
		return Object{}, fmt.Errorf("read content: %w", err)
	}
	if filled < s3SmallRead {
		return s.putSmall(ctx, kind, hr, bytes.Clone(buf[:filled]), opts)
	}
	key, err := newUniqueKey(kind)
	if err != nil {
		return Object{}, err
	}
	ct := contentType(opts.ContentType)
	var whole []byte // the content, when it ended within the first part
	err = s.upload(ctx, key, minio.PutObjectOptions{ContentType: ct}, func(uploadID string) ([]minio.CompletePart, error) {
		parts, first, err := s.uploadStream(ctx, key, uploadID, src, filled, buf)
		if err == nil && first != nil {
			// A copy on the heap: a request that failed may be read by the HTTP
			// transport after it returned, and buf goes back to the free list.
			whole = bytes.Clone(first)
			return nil, errWholeInFirstPart // aborts the upload
		}
		return parts, err
	})
	if whole != nil {
		return s.putSmall(ctx, kind, hr, whole, opts)
	}
	if err != nil {
		return Object{}, err
	}
	obj, err := s.settle(ctx, kind, key, hr, ct, opts)
	if err != nil || obj.Key != key {
		// Failed, or the content was stored already: ours goes.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s3CleanupTimeout)
		defer cancel()
		_ = s.client.RemoveObject(cctx, s.bucket, key, minio.RemoveObjectOptions{}) // best effort
	}
	return obj, err
}

// takePart returns a free part buffer, or a new one.
func (s *S3Store) takePart() []byte {
	select {
	case b := <-s.ownFree:
		return b
	default:
		return allocPart(s.partSize)
	}
}

// givePart keeps b for the next takePart, or releases it.
func (s *S3Store) givePart(b []byte) {
	select {
	case s.ownFree <- b:
	default:
		freePart(b)
	}
}

// errWholeInFirstPart ends an upload whose content ended within its first part.
var errWholeInFirstPart = errors.New("the content ended within its first part")

// uploadStream uploads the parts of uploadID, each of the part size but the
// last, from buf's first filled bytes and then src, in buf (one part long): each part is uploaded
// as it is read, its request reading buf behind the reader, so that reading
// and hashing overlap the upload in one part of memory. A part's length is
// only known at its end: each is sent as a full part, and when src ends within
// it, that request is abandoned and the part sent again with its true length
// from buf. When src ends within the first part, nothing is uploaded and first
// is the whole content.
//
// Once a full part's request has taken all of buf, buf holds the next part
// while the server still answers for the previous one (it stores the part
// before it answers: on versitygw over loopback a few milliseconds per part, in
// which the handler would otherwise wait); at most one answer is awaited so.
func (s *S3Store) uploadStream(ctx context.Context, key, uploadID string, src io.Reader, filled int, buf []byte) (parts []minio.CompletePart, first []byte, err error) {
	var grown []byte // a part buffer larger than buf, once parts grow
	defer func() {
		if grown != nil {
			freePart(grown) // after the last answer: deferred first
		}
	}()
	var answer <-chan partAnswer // the previous part's, not yet read
	defer func() {
		if answer != nil {
			<-answer // its request no longer runs when uploadStream returns
		}
	}()
	// settle reads the previous part's answer, if one is awaited.
	settle := func() error {
		if answer == nil {
			return nil
		}
		a := <-answer
		answer = nil
		if a.err != nil {
			return a.err
		}
		parts = append(parts, a.part)
		return nil
	}
	for number := 1; ; number++ {
		if number > s3MaxParts {
			return nil, nil, fmt.Errorf("content exceeds %d parts of up to %d bytes", s3MaxParts, s3MaxPartSize)
		}
		if size := ownPartSize(s.partSize, s.partsPerSize, number); size > int64(len(buf)) {
			// The previous request has taken all of buf: nothing reads it now.
			if grown != nil {
				freePart(grown)
			}
			grown = allocPart(size)
			buf = grown
		}
		ps := newPartStream(buf, filled)
		sent := make(chan partAnswer, 1)
		go func() {
			part, err := s.uploadPartStream(ctx, key, uploadID, number, ps, int64(len(buf)))
			sent <- partAnswer{part: part, err: err}
		}()
		n, rerr := ps.fill(ctxReader{ctx: ctx, r: src})
		filled = 0
		if rerr != nil || n < len(buf) {
			// src failed or ended: abandon the request that waits for a full part.
			ps.revoke()
			<-sent
			if rerr != nil {
				return nil, nil, fmt.Errorf("read content: %w", rerr)
			}
			if err := settle(); err != nil {
				return nil, nil, err
			}
			switch {
			case number == 1:
				return nil, buf[:n], nil
			case n == 0:
				return parts, nil, nil // the previous part ended exactly at the end
			}
			last := newPartStream(buf[:n], n)
			last.ended = true
			p, err := s.uploadPartStream(ctx, key, uploadID, number, last, int64(n))
			if err != nil {
				return nil, nil, err
			}
			return append(parts, p), nil, nil
		}
		// The request has the whole part, or has failed: either way it reads
		// buf no more, and the next part can be read into it.
		ps.taken()
		if err := settle(); err != nil {
			<-sent
			return nil, nil, err
		}
		answer = sent
	}
}

// s3PartsPerSize is how many parts of an upload under a key of its own have
// one size (ownPartSize).
const s3PartsPerSize = 1000

// ownPartSize is the size of part number (from 1) of an upload under a key of
// its own: partSize for the first perSize (s3PartsPerSize) parts, twice that for the next
// ones, and so on up to S3's largest part. A small part size, which a Put holds
// in memory, thus still reaches S3's largest object (5 TiB) within its 10,000
// parts: an output holds more than one part size only past 1,000 parts.
func ownPartSize(partSize int64, perSize, number int) int64 {
	grow := (number - 1) / perSize
	if grow > 10 || partSize<<grow > s3MaxPartSize {
		return s3MaxPartSize
	}
	return partSize << grow
}

// partAnswer is the outcome of one part's request.
type partAnswer struct {
	part minio.CompletePart
	err  error
}

// uploadPartStream uploads part number from ps, then revokes ps: the
// transport may go on reading a request's body after it failed, and ps's
// buffer is to be used again.
func (s *S3Store) uploadPartStream(ctx context.Context, key, uploadID string, number int, ps *partStream, n int64) (minio.CompletePart, error) {
	defer ps.revoke()
	return s.uploadPart(ctx, key, uploadID, number, ps, n)
}

// partStream is the body of one part's request: it reads buf as the reader
// fills it (fill), so that the upload follows the reading, until it is
// revoked. buf is only read under mu, so that once revoke returns, nothing of
// the request reads it any more.
type partStream struct {
	buf     []byte
	mu      sync.Mutex
	cond    sync.Cond
	n       int  // bytes of buf filled
	off     int  // bytes of buf read by the request
	ended   bool // fill is done
	revoked bool // the request is over, or to fail
}

func newPartStream(buf []byte, filled int) *partStream {
	p := &partStream{buf: buf, n: filled}
	p.cond.L = &p.mu
	return p
}

// errPartRevoked fails a part's request whose content ended short of it, or
// reads after its request ended.
var errPartRevoked = errors.New("part abandoned: its request is over")

func (p *partStream) Read(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.off == p.n && !p.ended && !p.revoked {
		p.cond.Wait()
	}
	if p.revoked {
		return 0, errPartRevoked
	}
	if p.off == p.n {
		return 0, io.EOF
	}
	k := copy(b, p.buf[p.off:p.n])
	p.off += k
	if p.off == len(p.buf) {
		p.cond.Broadcast() // taken
	}
	return k, nil
}

// fill reads r into buf after what is filled already until buf is full or r
// ends, publishing each read to the request, and returns the bytes filled.
// The request reads only what is published, so the two never touch the same
// bytes at once.
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

// taken waits until the request has read all of a full part, or is over:
// from then on it reads buf no more (a request that read it all reads once
// more only to see its end, which Read answers from off and n).
func (p *partStream) taken() {
	p.mu.Lock()
	for p.off < len(p.buf) && !p.revoked {
		p.cond.Wait()
	}
	p.mu.Unlock()
}

// revoke fails the request's next read: once it returns, the request reads
// buf no more.
func (p *partStream) revoke() {
	p.mu.Lock()
	p.revoked = true
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
