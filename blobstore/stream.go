package blobstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
)

// contentType returns ct or the default.
func contentType(ct string) string {
	if ct == "" {
		return DefaultContentType
	}
	return ct
}

// checkPutOptions validates kind and opts and returns the key the object will be
// stored under when opts.Digest fixes it ("" when it is the content's hash).
func checkPutOptions(kind string, opts PutOptions) (fixedKey string, err error) {
	if err := checkKind(kind); err != nil {
		return "", err
	}
	if opts.Digest == "" {
		if opts.VerifyDigest {
			return "", fmt.Errorf("%w: VerifyDigest without Digest", ErrInvalidKey)
		}
		return "", nil
	}
	return KeyFor(kind, opts.Digest)
}

// hashingReader hashes and counts what is read through it, and refuses to read
// more than one byte past an expected size so that a lying Size stops early.
type hashingReader struct {
	r    io.Reader
	h    hash.Hash
	n    int64
	size int64 // expected size when > 0
}

func newHashingReader(r io.Reader, size int64) *hashingReader {
	if size > 0 {
		r = io.LimitReader(r, size+1)
	}
	return &hashingReader{r: r, h: sha256.New(), size: size}
}

func (hr *hashingReader) Read(p []byte) (int, error) {
	n, err := hr.readRaw(p)
	hr.h.Write(p[:n])
	return n, err
}

// readRaw reads and counts as Read does but leaves hashing what it read to the
// caller (hr.h.Write, in order), who may hash a piece while reading the next.
func (hr *hashingReader) readRaw(p []byte) (int, error) {
	n, err := hr.r.Read(p)
	hr.n += int64(n)
	if hr.size > 0 && hr.n > hr.size {
		return n, fmt.Errorf("%w: more than %d bytes", ErrSizeMismatch, hr.size)
	}
	return n, err
}

// rawReader reads a hashingReader without hashing (readRaw).
type rawReader struct{ hr *hashingReader }

func (r rawReader) Read(p []byte) (int, error) { return r.hr.readRaw(p) }

// finish checks the count and returns the content's digest "sha256:<hex>".
func (hr *hashingReader) finish() (string, error) {
	if hr.size > 0 && hr.n != hr.size {
		return "", fmt.Errorf("%w: read %d bytes, expected %d", ErrSizeMismatch, hr.n, hr.size)
	}
	return DigestPrefix + hex.EncodeToString(hr.h.Sum(nil)), nil
}

// identify finishes reading and names what was read: the content's own digest
// sum, the digest it is addressed by (opts.Digest when given, checked against sum
// when opts.VerifyDigest) and its key. Both stores call it once the content is in.
func (hr *hashingReader) identify(kind string, opts PutOptions) (sum, digest, key string, err error) {
	if sum, err = hr.finish(); err != nil {
		return "", "", "", err
	}
	digest = sum
	if opts.Digest != "" {
		if opts.VerifyDigest && opts.Digest != sum {
			return "", "", "", fmt.Errorf("%w: content is %s, expected %s", ErrDigestMismatch, sum, opts.Digest)
		}
		digest = opts.Digest
	}
	if key, err = KeyFor(kind, digest); err != nil {
		return "", "", "", err
	}
	return sum, digest, key, nil
}

// clampRange applies the GetOptions rules to an object of size bytes and returns
// the offset and length to read.
func clampRange(opts GetOptions, size int64) (offset, length int64, err error) {
	if opts.Offset < 0 || opts.Length < 0 {
		return 0, 0, fmt.Errorf("%w: offset %d, length %d", ErrInvalidRange, opts.Offset, opts.Length)
	}
	if opts.Offset > size {
		return 0, 0, fmt.Errorf("%w: offset %d past size %d", ErrInvalidRange, opts.Offset, size)
	}
	length = size - opts.Offset
	if opts.Length > 0 && opts.Length < length {
		length = opts.Length
	}
	return opts.Offset, length, nil
}

// ctxReader fails reads once ctx is done, so that a long copy from a reader that
// ignores contexts stops when the caller gives up.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// readCloser joins a reader (a section of a file, a limited body) with the Closer
// of what it reads from.
type readCloser struct {
	io.Reader
	io.Closer
}

// putOnce is the Put every backend shares: check the options; when the address is
// given (PutOptions.Digest) and the object exists, return it without reading r;
// otherwise store with put.
func putOnce(ctx context.Context, kind string, r io.Reader, opts PutOptions,
	stat func(context.Context, string) (Object, error),
	put func(context.Context, string, io.Reader, PutOptions) (Object, error),
) (Object, error) {
	fixedKey, err := checkPutOptions(kind, opts)
	if err != nil {
		return Object{}, fmt.Errorf("put %s: %w", kind, err)
	}
	if fixedKey != "" {
		// The address is known before the content: claim it before looking.
		if err := opts.claim(ctx, fixedKey); err != nil {
			return Object{}, fmt.Errorf("put %s: %w", kind, err)
		}
		opts.Claim = nil
	}
	if fixedKey != "" && !opts.VerifyDigest {
		obj, err := stat(ctx, fixedKey)
		if err == nil {
			return obj, nil
		}
		if !errors.Is(err, ErrNotFound) {
			return Object{}, fmt.Errorf("put %s: %w", fixedKey, err)
		}
	}
	obj, err := put(ctx, kind, r, opts)
	if err != nil {
		return Object{}, fmt.Errorf("put %s: %w", kind, err)
	}
	return obj, nil
}
