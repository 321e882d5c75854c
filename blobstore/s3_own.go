package blobstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/minio/minio-go/v7"
	"golang.org/x/sync/errgroup"
)

// putOwn stores content larger than one part under a fresh key of its own
// (PutOptions.Index): first (read and hashed already, in a pooled part buffer
// that release returns) and the rest of src go up once, as a multipart upload,
// one part uploading while the next is read and hashed; then settle finds the
// content stored already or records the new object. Memory: two parts.
//
// Crash safety: until the upload completes, a crash leaves an incomplete upload,
// which CleanTemp aborts; once it completes, an object no row names, which the
// collector deletes (maintenance.Collector). A failed or canceled Put removes
// both itself.
func (s *S3Store) putOwn(ctx context.Context, kind string, hr *hashingReader, src io.Reader, first []byte, release func(), opts PutOptions) (Object, error) {
	key, err := newUniqueKey(kind)
	if err != nil {
		release()
		return Object{}, err
	}
	ct := contentType(opts.ContentType)
	if err := s.upload(ctx, key, minio.PutObjectOptions{ContentType: ct}, func(uploadID string) ([]minio.CompletePart, error) {
		return s.uploadStream(ctx, key, uploadID, src, first, release)
	}); err != nil {
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

// uploadStream uploads first and the rest of src as the parts of uploadID, in
// order, until a part is shorter than partSize: part n uploads while part n+1
// is read into the other buffer. The buffers go back to the pool only after a
// success: a request that failed may still be read by the HTTP transport after
// it returned.
func (s *S3Store) uploadStream(ctx context.Context, key, uploadID string, src io.Reader, first []byte, release func()) ([]minio.CompletePart, error) {
	spare := s.parts.Get().(*[]byte)
	var parts []minio.CompletePart
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(1) // so g.Go of part n+1 waits for part n: its buffer is free to read into
	bufs := [2][]byte{first[:cap(first)], *spare}
	data := first
	for number := 1; ; number++ {
		if number > s3MaxParts {
			_ = g.Wait()
			return nil, fmt.Errorf("content exceeds %d parts of %d bytes", s3MaxParts, s.partSize)
		}
		part := data
		g.Go(func() error {
			p, err := s.uploadPart(gctx, key, uploadID, number, bytes.NewReader(part), int64(len(part)))
			if err != nil {
				return err
			}
			parts = append(parts, p) // the parts upload one at a time, in order
			return nil
		})
		if int64(len(part)) < s.partSize {
			break // a short part is the last one
		}
		buf := bufs[number%2]
		n, err := readFull(ctxReader{ctx: gctx, r: src}, buf)
		if err != nil {
			if werr := g.Wait(); werr != nil {
				return nil, werr // the upload failed first, and canceled the read
			}
			return nil, fmt.Errorf("read content: %w", err)
		}
		if n == 0 {
			break // the last part ended exactly at the end
		}
		data = buf[:n]
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	release()
	s.parts.Put(spare)
	return parts, nil
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
