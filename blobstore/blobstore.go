package blobstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// Errors returned by every Store. Backends translate their own errors (minio's
// NoSuchKey, os.ErrNotExist) to these at their edge; check them with errors.Is.
var (
	// ErrNotFound means no object exists under the key.
	ErrNotFound = errors.New("blobstore: object not found")
	// ErrNotSupported means the backend cannot do the operation (for example a
	// presigned URL from the file backend).
	ErrNotSupported = errors.New("blobstore: operation not supported by this backend")
	// ErrInvalidKey means a key is not of the form <kind>/sha256/<64 hex>, a kind is
	// not a short lower-case word, or a digest is not "sha256:<64 hex>".
	ErrInvalidKey = errors.New("blobstore: invalid key")
	// ErrDigestMismatch means PutOptions.Digest was set and the caller's content did
	// not hash to it while PutOptions.VerifyDigest was true. Nothing is stored.
	ErrDigestMismatch = errors.New("blobstore: content does not match digest")
	// ErrSizeMismatch means PutOptions.Size was positive and the reader yielded a
	// different number of bytes. Nothing is stored.
	ErrSizeMismatch = errors.New("blobstore: content length does not match size")
	// ErrInvalidRange means GetOptions asked for a negative offset or length, or
	// an offset past the end of the object.
	ErrInvalidRange = errors.New("blobstore: invalid range")
	// ErrUnavailable means the store could not be reached (refused, reset,
	// unreachable, DNS) or answered with a server error (5xx, SlowDown) after the
	// client's own retries: an outage, worth trying again later. The error wraps
	// the backend's too.
	ErrUnavailable = errors.New("blobstore: unavailable")
)

// DefaultContentType is the media type of objects stored without one.
const DefaultContentType = "application/octet-stream"

// Object describes a stored object.
type Object struct {
	// Key is the object's name: "<kind>/sha256/<hex>", or "<kind>/u/<hex>" for
	// an object written once under a name of its own (PutOptions.Index).
	Key string
	// Digest is "sha256:<hex>", the address the key was built from. Under a name
	// of its own, Put returns the content's hash, but Get and Stat return ""
	// (the key does not say it; the reference that names the object does).
	Digest string
	// SHA256 is "sha256:<hex>" of the stored bytes. It equals Digest unless the
	// object was stored under a caller-provided address (PutOptions.Digest); ""
	// where Digest is.
	SHA256 string
	// Size is the length of the stored bytes (the whole object, also when Get
	// reads a range of it).
	Size int64
	// ContentType is the media type given at Put ("application/octet-stream" if none).
	ContentType string
}

// PutOptions tune Put. The zero value stores the bytes under the hash of their content.
type PutOptions struct {
	// ContentType of the object; default "application/octet-stream". When the
	// object already exists, the stored content type is kept.
	ContentType string
	// Digest, when set ("sha256:<hex>"), is the address to store the object under
	// instead of the hash of its bytes. Bundles use it: their address is the digest of
	// their canonical tree, not of the gzip bytes. When an object already exists
	// under that address, Put returns it without reading r. Default: empty.
	Digest string
	// VerifyDigest, with Digest set, requires the content to hash to Digest;
	// otherwise Put stores nothing and returns ErrDigestMismatch. Default false.
	VerifyDigest bool
	// Size is the length of r when known, or -1 (the default, 0, is read as unknown too
	// unless r is empty). Backends use it to pick an upload strategy; it is checked:
	// a positive Size that differs from the content's length is ErrSizeMismatch.
	Size int64
	// Claim, when set, is called with the object's key once the key is known (at
	// once when Digest fixes it, else when the content has been read and hashed)
	// and before Put looks whether the object is already stored. An error stops
	// the Put: nothing is stored and the error is returned. Writers of objects
	// that a catalog row will name pass the catalog's claim
	// (catalog.Store.BlobClaim), so that the garbage collector cannot delete an
	// object between the moment Put finds it stored and the moment the row that
	// names it commits (see maintenance.Collector). Default nil.
	Claim func(ctx context.Context, key string) error
	// Index, when set (with Claim), lets an S3 Put of content of one part or
	// more, whose address is not given (no Digest), write it once: streamed as a
	// multipart upload to a fresh key of its own, "<kind>/u/<hex>", while it is
	// hashed, with no spool file and no server-side copy (one part in memory). Once the content is
	// in, Put looks for the same content already stored, first where Index
	// records it and then at its content address (each key claimed before it is
	// looked at); when found, its own upload is deleted and the stored object
	// returned; else it claims its key, checks that the object is still there,
	// and records it in Index. The returned Object's Key is then the key of its
	// own, and Digest and SHA256 the content's hash; a reference to it records
	// the key (Ref.ObjectKey). The file store and smaller content ignore Index.
	// Writers of payloads pass the catalog (catalog.Store). Default nil.
	Index Index
}

// Index records, by content, the objects a Put stored under a key of their own
// (PutOptions.Index); catalog.Store implements it over its blob_digests table.
// A record is a hint: a recorded object may have been collected since, and Put
// checks that it exists before it uses it.
type Index interface {
	// BlobLookup returns the key of an object recorded as holding the content
	// of address ("<kind>/sha256/<hex>"), or "" when none is.
	BlobLookup(ctx context.Context, address string) (string, error)
	// BlobRecord records that the object under key holds the content of
	// address, replacing the record of another object of the same content.
	BlobRecord(ctx context.Context, address, key string) error
}

// claim calls opts.Claim, if any, with key.
func (opts PutOptions) claim(ctx context.Context, key string) error {
	if opts.Claim == nil {
		return nil
	}
	if err := opts.Claim(ctx, key); err != nil {
		return fmt.Errorf("claim %s: %w", key, err)
	}
	return nil
}

// GetOptions select a byte range. The zero value reads the whole object.
//
// A range is clamped to the object: a Length reaching past the end reads to the
// end, and Offset equal to the object's size reads nothing. A negative Offset or
// Length, or an Offset greater than the size, is ErrInvalidRange.
type GetOptions struct {
	// Offset of the first byte to read; default 0.
	Offset int64
	// Length to read from Offset; 0 means to the end.
	Length int64
}

// Store is a content-addressed object store. Every method is safe for concurrent use.
// Keys are "<kind>/sha256/<hex>", or "<kind>/u/<hex>" for an object under a
// name of its own (PutOptions.Index); kinds are short lower-case words
// (KindBundles, KindPayloads, KindLogs); see KeyFor and ParseKey.
type Store interface {
	// Put streams r into the store under "<kind>/sha256/<hex>" and returns the
	// stored object. The sha256 is computed while writing; nothing holds the whole
	// content in memory. A reader never sees a partial object. Putting content that is
	// already stored is a no-op that returns the existing object. Concurrent Puts of
	// the same content all succeed with the same Object.
	// Errors: ErrInvalidKey (bad kind or Digest), ErrSizeMismatch, ErrDigestMismatch,
	// or the reader's or backend's error.
	Put(ctx context.Context, kind string, r io.Reader, opts PutOptions) (Object, error)
	// Get opens the object (or a range of it, see GetOptions) for reading; the
	// caller closes it. The returned Object describes the whole object.
	// ErrNotFound if absent, ErrInvalidKey, ErrInvalidRange.
	Get(ctx context.Context, key string, opts GetOptions) (io.ReadCloser, Object, error)
	// Stat describes the object; ErrNotFound if absent, ErrInvalidKey.
	Stat(ctx context.Context, key string) (Object, error)
	// Delete removes the object; deleting an absent object is not an error.
	// ErrInvalidKey.
	Delete(ctx context.Context, key string) error
	// PresignGet returns a URL that reads the object without credentials until
	// expiry; ErrNotSupported where the backend has no such URLs. It does not check
	// that the object exists.
	PresignGet(ctx context.Context, key string, expiry time.Duration) (string, error)
	// Ping checks that the store answers (readiness).
	Ping(ctx context.Context) error
}
