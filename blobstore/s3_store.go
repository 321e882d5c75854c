package blobstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"golang.org/x/sync/errgroup"
)

// S3 limits and layout.
const (
	// DefaultPartSize is the multipart part size S3Store uses unless configured:
	// memory per Put in flight is about one part when nothing is spooled. A
	// request that sends a part waits for the server's answer beside the next
	// part's reading (uploadStream), so a small part costs little rate: on
	// versitygw over loopback, 8 MiB parts keep up with a plain PUT of 16 MiB
	// ones (bench/README.md, large_output).
	DefaultPartSize = 8 << 20
	// s3MinPartSize and s3MaxPartSize bound parts (S3's own limits).
	s3MinPartSize = 5 << 20
	s3MaxPartSize = 5 << 30
	// s3MaxParts is the largest number of parts of a multipart upload.
	s3MaxParts = 10000
	// s3MaxCopySize is the largest object a single CopyObject request may copy;
	// larger ones need a multipart copy (ComposeObject).
	s3MaxCopySize = 5 << 30
	// s3SmallRead is how much Put reads into a small buffer before it takes a
	// whole part buffer, so that small objects cost little memory.
	s3SmallRead = 1 << 20
	// s3SpoolUploads is how many parts of a spooled content are uploaded at once.
	s3SpoolUploads = 4
	// s3TempPrefix holds uploads whose address is not known yet. Keys of kinds
	// start with a letter, so the prefix cannot collide with one.
	s3TempPrefix = ".tmp/"
	// s3MetaSHA256 is the user metadata holding "sha256:<hex>" of the stored bytes.
	s3MetaSHA256 = "Cairn-Sha256"
	// s3MaxPresignExpiry is the longest validity of a presigned URL (SigV4 limit).
	s3MaxPresignExpiry = 7 * 24 * time.Hour
	// s3CleanupTimeout bounds the best-effort removal of temporary objects and
	// aborted uploads after a failed or canceled Put.
	s3CleanupTimeout = time.Minute
)

// S3Config configures an S3Store. It is passed by value; NewS3 validates it.
type S3Config struct {
	// Endpoint is the server's base URL, such as "http://127.0.0.1:9000" or
	// "https://s3.eu-west-1.amazonaws.com"; "https" turns TLS on. Required.
	Endpoint string
	// Bucket holds the objects. It must exist. Required.
	Bucket string
	// Region of the bucket; default "us-east-1". Setting it spares a
	// bucket-location request.
	Region string
	// AccessKey signs requests with SecretKey. With both empty, requests are
	// anonymous. Default empty.
	AccessKey string
	// SecretKey goes with AccessKey. Default empty.
	SecretKey string
	// SessionToken is the token of temporary credentials; default empty.
	SessionToken string
	// PathStyle forces path-style addressing ("host/bucket/key"). Default false:
	// virtual-host style on AWS and Google endpoints, path style on the others
	// (MinIO, versitygw, LocalStack).
	PathStyle bool
	// PartSize of multipart uploads, between 5 MiB and 5 GiB; default
	// DefaultPartSize (8 MiB). Each Put in flight holds about one part in
	// memory. Objects are limited to 10,000 parts: under keys of their own
	// (PutOptions.Index) parts double in size every 1,000 (ownPartSize), which
	// reaches S3's largest object; otherwise 10,000 parts of this size (about 78
	// GiB at the default; spooled content takes larger parts when it needs them).
	PartSize int64
	// SpoolDir is the local folder where Put writes content larger than one part
	// while hashing it, so that it is uploaded once, to its final key. Default
	// os.TempDir(); SpoolNone uploads to a temporary key and copies server-side
	// instead (no local disk, twice the S3 server's work). The spool file is
	// unlinked as soon as it is created, so a crash leaves nothing behind; it
	// needs free space for the largest output in flight.
	SpoolDir string
}

// SpoolNone as S3Config.SpoolDir turns spooling off.
const SpoolNone = "none"

func (c S3Config) withDefaults() S3Config {
	if c.Region == "" {
		c.Region = "us-east-1"
	}
	if c.PartSize == 0 {
		c.PartSize = DefaultPartSize
	}
	switch c.SpoolDir {
	case "":
		c.SpoolDir = os.TempDir()
	case SpoolNone:
		c.SpoolDir = ""
	}
	return c
}

// S3Store is a Store on an S3-compatible bucket (AWS S3, MinIO, versitygw,
// LocalStack), through minio-go. It is safe for concurrent use.
//
// Put reads the content once. Content that ends within its first megabyte is
// hashed in memory and written to its final key with one PutObject. With an
// index (PutOptions.Index), content that ends within its first part is too,
// and longer content is streamed once to a key of its own (putOwn). Otherwise
// a larger content's address is only known at its end: it is written to a spool file
// (S3Config.SpoolDir) while hashed, a few megabytes in memory, then uploaded to
// its final key (one PutObject up to a part, past it a multipart upload of
// s3SpoolUploads parts at a time).
// Without a spool folder, content that fits in one part is written from memory
// with one PutObject, and a larger one is uploaded part by part (one part in
// memory) to a temporary key under ".tmp/", then copied server-side to its
// final key and the temporary object deleted. A crash leaves an incomplete multipart upload, or a temporary
// object, behind: CleanTemp (run by the garbage collector, maintenance.Collector)
// removes them once they are older than the longest upload.
type S3Store struct {
	client   *minio.Client
	core     minio.Core
	bucket   string
	endpoint string
	partSize int64
	spoolDir string      // "" spools nothing
	parts    sync.Pool   // of *[]byte, len partSize
	ownFree  chan []byte // part buffers of putOwn, s3OwnFree at most
	// partsPerSize is how many parts of an upload under a key of its own have
	// one size (ownPartSize): s3PartsPerSize but in tests.
	partsPerSize int
}

// NewS3 returns a store on cfg.Bucket at cfg.Endpoint. It does no I/O: use Ping
// to check that the server answers and the bucket exists. It returns an error
// when cfg is invalid.
func NewS3(cfg S3Config) (*S3Store, error) {
	cfg = cfg.withDefaults()
	u, err := url.Parse(cfg.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("new s3 store: endpoint: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return nil, fmt.Errorf("new s3 store: endpoint %q is not http(s)://host[:port]", cfg.Endpoint)
	}
	if cfg.Bucket == "" {
		return nil, errors.New("new s3 store: empty bucket")
	}
	if cfg.PartSize < s3MinPartSize || cfg.PartSize > s3MaxPartSize {
		return nil, fmt.Errorf("new s3 store: part size %d outside [%d, %d]", cfg.PartSize, s3MinPartSize, s3MaxPartSize)
	}
	lookup := minio.BucketLookupAuto
	if cfg.PathStyle {
		lookup = minio.BucketLookupPath
	}
	client, err := minio.New(u.Host, &minio.Options{
		Creds:        credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, cfg.SessionToken),
		Secure:       u.Scheme == "https",
		Region:       cfg.Region,
		BucketLookup: lookup,
	})
	if err != nil {
		return nil, fmt.Errorf("new s3 store: %w", err)
	}
	s := &S3Store{
		client:   client,
		core:     minio.Core{Client: client},
		bucket:   cfg.Bucket,
		endpoint: u.Scheme + "://" + u.Host,
		partSize: cfg.PartSize,
		spoolDir: cfg.SpoolDir,
		ownFree:  make(chan []byte, s3OwnFree),

		partsPerSize: s3PartsPerSize,
	}
	s.parts.New = func() any {
		b := make([]byte, s.partSize)
		return &b
	}
	return s, nil
}

// String describes the store for logs (no credentials).
func (s *S3Store) String() string {
	return "s3://" + s.bucket + "?endpoint=" + s.endpoint
}

// s3Error translates a minio error at the backend's edge: a missing object
// becomes ErrNotFound; a server that cannot be reached or answers with a server
// error wraps ErrUnavailable; anything else is returned as is.
func s3Error(err error) error {
	var resp minio.ErrorResponse
	if errors.As(err, &resp) && (resp.Code == minio.NoSuchKey || resp.Code == "NotFound") {
		return ErrNotFound
	}
	if s3Unavailable(err) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// s3Unavailable reports an outage: the connection failed (minio-go returns the
// transport's *url.Error, a net.Error, once its retries are spent) or the server
// answered 5xx or SlowDown. A canceled or timed-out context says nothing about
// the server.
func s3Unavailable(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var resp minio.ErrorResponse
	if errors.As(err, &resp) {
		return resp.StatusCode >= http.StatusInternalServerError || resp.Code == "SlowDown"
	}
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, io.ErrUnexpectedEOF)
}

// isInvalidRange reports a 416 answer to a ranged GET.
func isInvalidRange(err error) bool {
	var resp minio.ErrorResponse
	return errors.As(err, &resp) && (resp.Code == minio.InvalidRange || resp.StatusCode == http.StatusRequestedRangeNotSatisfiable)
}

// Put implements Store.Put; see S3Store for how.
func (s *S3Store) Put(ctx context.Context, kind string, r io.Reader, opts PutOptions) (Object, error) {
	return putOnce(ctx, kind, r, opts, s.stat, s.put)
}

func (s *S3Store) put(ctx context.Context, kind string, r io.Reader, opts PutOptions) (Object, error) {
	hr := newHashingReader(r, opts.Size)
	src := ctxReader{ctx: ctx, r: hr}

	// With an index, content over a small part goes to a key of its own, never
	// to the spool.
	own := opts.Index != nil && opts.Digest == ""
	if own && (opts.Size <= 0 || opts.Size > s3SmallRead) {
		return s.putOwn(ctx, kind, hr, src, opts)
	}
	var small []byte
	if s.spoolDir != "" || own || opts.Size <= s3SmallRead {
		data, ended, err := readSmall(src, opts.Size)
		if err != nil {
			return Object{}, fmt.Errorf("read content: %w", err)
		}
		if ended {
			return s.putSmall(ctx, kind, hr, data, opts)
		}
		if own {
			// Its size is known and at most s3SmallRead: hr refused more.
			return Object{}, fmt.Errorf("%w: more than %d bytes", ErrSizeMismatch, opts.Size)
		}
		if s.spoolDir != "" {
			if spool, err := newSpoolFile(s.spoolDir); err == nil {
				return s.putSpooled(ctx, kind, hr, data, spool, opts)
			}
			// No spool file (the folder is gone, full, or not ours): the
			// temporary key still works.
		}
		small = data
	}
	first, full, release, err := s.fillPart(src, small)
	if err != nil {
		return Object{}, fmt.Errorf("read content: %w", err)
	}
	defer release()
	if !full {
		return s.putSmall(ctx, kind, hr, first, opts)
	}
	return s.putLarge(ctx, kind, hr, src, first, opts)
}

// readSmall reads the start of r into a small buffer: size+1 bytes when size is
// known and at most s3SmallRead (room to see a longer reader), else s3SmallRead.
// ended says r ended within it.
func readSmall(r io.Reader, size int64) (data []byte, ended bool, err error) {
	n := s3SmallRead
	if size > 0 && size <= s3SmallRead {
		n = int(size) + 1
	}
	buf := make([]byte, n)
	m, err := readFull(r, buf)
	return buf[:m], m < n, err
}

// fillPart reads on from data (read from r already) into a pooled part buffer
// until it is full (more may follow) or r ends. release returns the buffer to
// the pool.
func (s *S3Store) fillPart(r io.Reader, data []byte) (part []byte, full bool, release func(), err error) {
	bp := s.parts.Get().(*[]byte)
	buf := *bp
	n := copy(buf, data)
	m, err := readFull(r, buf[n:])
	if err != nil {
		s.parts.Put(bp)
		return nil, false, func() {}, err
	}
	return buf[:n+m], n+m == len(buf), func() { s.parts.Put(bp) }, nil
}

// readFull reads until buf is full or r ends. Unlike io.ReadFull, an
// io.ErrUnexpectedEOF from r (a truncated request body) stays an error.
func readFull(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// address names the content hr has read (hashingReader.identify), claims its
// key and looks for it: stored is the object when the key exists already, and
// there is nothing to upload.
func (s *S3Store) address(ctx context.Context, kind string, hr *hashingReader, opts PutOptions) (sum, digest, key string, stored *Object, err error) {
	if sum, digest, key, err = hr.identify(kind, opts); err != nil {
		return "", "", "", nil, err
	}
	if err := opts.claim(ctx, key); err != nil {
		return "", "", "", nil, err
	}
	obj, err := s.stat(ctx, key)
	if err == nil {
		return sum, digest, key, &obj, nil
	}
	if !errors.Is(err, ErrNotFound) {
		return "", "", "", nil, err
	}
	return sum, digest, key, nil, nil
}

// deref is *o, or the zero Object for nil.
func deref(o *Object) Object {
	if o == nil {
		return Object{}
	}
	return *o
}

// putSmall stores content that was read whole into data.
func (s *S3Store) putSmall(ctx context.Context, kind string, hr *hashingReader, data []byte, opts PutOptions) (Object, error) {
	sum, digest, key, stored, err := s.address(ctx, kind, hr, opts)
	if err != nil || stored != nil {
		return deref(stored), err
	}
	ct := contentType(opts.ContentType)
	_, err = s.core.PutObject(ctx, s.bucket, key, bytes.NewReader(data), int64(len(data)), "", strings.TrimPrefix(sum, DigestPrefix),
		minio.PutObjectOptions{ContentType: ct, UserMetadata: map[string]string{s3MetaSHA256: sum}})
	if err != nil {
		return Object{}, fmt.Errorf("put object %s: %w", key, s3Error(err))
	}
	return Object{Key: key, Digest: digest, SHA256: sum, Size: int64(len(data)), ContentType: ct}, nil
}

// putSpooled writes first and the rest of hr's content to spool, then uploads it
// to its final key, now known: with one PutObject when it fits in a part, else
// with a multipart upload. Memory: first, spoolPieces pieces of s3SmallRead
// while spooling, and one while uploading.
func (s *S3Store) putSpooled(ctx context.Context, kind string, hr *hashingReader, first []byte, spool *spoolFile, opts PutOptions) (Object, error) {
	defer spool.Close()
	if err := spoolRest(ctx, spool, hr, first); err != nil {
		return Object{}, fmt.Errorf("spool content: %w", err)
	}
	sum, digest, key, stored, err := s.address(ctx, kind, hr, opts)
	if err != nil || stored != nil {
		return deref(stored), err
	}
	ct := contentType(opts.ContentType)
	size := hr.n
	meta := minio.PutObjectOptions{ContentType: ct, UserMetadata: map[string]string{s3MetaSHA256: sum}}
	if size <= s.partSize {
		// The reading buffer goes back to the pool only after a success: a request
		// that failed may still be read by the HTTP transport after it returned.
		bp := spoolPool.Get().(*[]byte)
		if _, err := s.core.PutObject(ctx, s.bucket, key, spool.reader(0, size, *bp), size, "", strings.TrimPrefix(sum, DigestPrefix), meta); err != nil {
			return Object{}, fmt.Errorf("put object %s: %w", key, s3Error(err))
		}
		spoolPool.Put(bp)
	} else if err := s.multipartSpool(ctx, key, meta, size, spool); err != nil {
		return Object{}, err
	}
	return Object{Key: key, Digest: digest, SHA256: sum, Size: size, ContentType: ct}, nil
}

// spoolRest writes first (read and hashed already) and the rest of hr's
// content to f, and hashes the rest. Three stages run at once over spoolPieces
// pieces of s3SmallRead: this goroutine reads, one goroutine writes to f, one
// hashes, so that spooling costs about the time of the slowest of them
// (hashing, where writes are direct).
func spoolRest(ctx context.Context, f *spoolFile, hr *hashingReader, first []byte) error {
	type piece struct {
		bp   *[]byte // from spoolPool
		buf  []byte
		n    int
		refs atomic.Int32 // stages yet to be done with it
	}
	free := make(chan *piece, spoolPieces)
	pieces := make([]*piece, spoolPieces)
	for i := range pieces {
		bp := spoolPool.Get().(*[]byte)
		pieces[i] = &piece{bp: bp, buf: *bp}
		free <- pieces[i]
	}
	// Every stage is done with every piece once wg.Wait returns.
	defer func() {
		for _, p := range pieces {
			spoolPool.Put(p.bp)
		}
	}()
	release := func(p *piece) {
		if p.refs.Add(-1) == 0 {
			free <- p
		}
	}
	writes, hashes := make(chan *piece, spoolPieces), make(chan *piece, spoolPieces)
	var werr error
	var failed atomic.Bool
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for p := range writes {
			if werr == nil {
				if werr = f.write(p.buf[:p.n]); werr != nil {
					failed.Store(true)
				}
			}
			release(p)
		}
	}()
	go func() {
		defer wg.Done()
		for p := range hashes {
			hr.h.Write(p.buf[:p.n])
			release(p)
		}
	}()

	p := <-free
	p.n = copy(p.buf, first)
	p.refs.Store(1)
	writes <- p
	src := ctxReader{ctx: ctx, r: rawReader{hr}}
	var err error
	for !failed.Load() {
		p := <-free
		n, rerr := readFull(src, p.buf)
		if n > 0 {
			p.n = n
			p.refs.Store(2)
			writes <- p
			hashes <- p
		} else {
			free <- p
		}
		if rerr != nil || n < len(p.buf) {
			err = rerr
			break
		}
	}
	close(writes)
	close(hashes)
	wg.Wait()
	if err != nil {
		return err
	}
	return werr
}

// upload runs a multipart upload of key: parts uploads the parts (uploadPart)
// and returns them in order; the upload is then completed, or aborted when parts
// fails.
func (s *S3Store) upload(ctx context.Context, key string, meta minio.PutObjectOptions,
	parts func(uploadID string) ([]minio.CompletePart, error),
) (err error) {
	uploadID, err := s.core.NewMultipartUpload(ctx, s.bucket, key, meta)
	if err != nil {
		return fmt.Errorf("start upload: %w", s3Error(err))
	}
	defer func() {
		if err != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s3CleanupTimeout)
			defer cancel()
			_ = s.core.AbortMultipartUpload(cctx, s.bucket, key, uploadID) // best effort
		}
	}()
	done, err := parts(uploadID)
	if err != nil {
		return err
	}
	if _, err := s.core.CompleteMultipartUpload(ctx, s.bucket, key, uploadID, done, minio.PutObjectOptions{}); err != nil {
		return fmt.Errorf("complete upload: %w", s3Error(err))
	}
	return nil
}

// uploadPart uploads part number (from 1) of an upload: n bytes of r.
func (s *S3Store) uploadPart(ctx context.Context, key, uploadID string, number int, r io.Reader, n int64) (minio.CompletePart, error) {
	p, err := s.core.PutObjectPart(ctx, s.bucket, key, uploadID, number, r, n, minio.PutObjectPartOptions{
		// Our own sha256 covers the content; signing every part with a
		// streaming SHA-256 as well costs a second pass for nothing.
		DisableContentSha256: true,
	})
	if err != nil {
		return minio.CompletePart{}, fmt.Errorf("upload part %d: %w", number, s3Error(err))
	}
	return minio.CompletePart{PartNumber: p.PartNumber, ETag: p.ETag}, nil
}

// multipart uploads key as a multipart upload of the parts next returns, one
// after the other, from offset 0 until a part is shorter than partSize or size
// bytes are in (size < 0: unknown).
func (s *S3Store) multipart(ctx context.Context, key string, meta minio.PutObjectOptions, size int64,
	next func(off int64) (io.Reader, int64, error),
) error {
	return s.upload(ctx, key, meta, func(uploadID string) ([]minio.CompletePart, error) {
		var parts []minio.CompletePart
		for off := int64(0); size < 0 || off < size; {
			r, n, err := next(off)
			if err != nil {
				return nil, err
			}
			if n == 0 && len(parts) > 0 {
				break // the previous part ended exactly at the end
			}
			if len(parts) == s3MaxParts {
				return nil, fmt.Errorf("content exceeds %d parts of %d bytes", s3MaxParts, s.partSize)
			}
			p, err := s.uploadPart(ctx, key, uploadID, len(parts)+1, r, n)
			if err != nil {
				return nil, err
			}
			parts = append(parts, p)
			off += n
			if n < s.partSize {
				break // a short part is the last one
			}
		}
		return parts, nil
	})
}

// multipartSpool uploads the size bytes of spool to key as a multipart upload,
// s3SpoolUploads parts at a time: the spool is read at any offset, and a part
// waits on the server more than on the disk (versitygw on 2 cores: 1 GiB at 0.75
// of a plain PUT's rate part after part, whose reader is memory).
func (s *S3Store) multipartSpool(ctx context.Context, key string, meta minio.PutObjectOptions, size int64, spool *spoolFile) error {
	// Parts of the configured size, or larger where 10,000 of them would not
	// hold the content (its size is known).
	partSize := max(s.partSize, (size+s3MaxParts-1)/s3MaxParts)
	count := int((size + partSize - 1) / partSize)
	if partSize > s3MaxPartSize {
		return fmt.Errorf("content exceeds %d parts of %d bytes", s3MaxParts, s3MaxPartSize)
	}
	return s.upload(ctx, key, meta, func(uploadID string) ([]minio.CompletePart, error) {
		parts := make([]minio.CompletePart, count)
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(s3SpoolUploads)
		for i := range count {
			g.Go(func() error {
				off := int64(i) * partSize
				n := min(partSize, size-off)
				// The buffer goes back to the pool only after a success, as in putSpooled.
				bp := spoolPool.Get().(*[]byte)
				p, err := s.uploadPart(gctx, key, uploadID, i+1, spool.reader(off, n, *bp), n)
				if err != nil {
					return err
				}
				spoolPool.Put(bp)
				parts[i] = p
				return nil
			})
		}
		return parts, g.Wait()
	})
}

// putLarge uploads first and the rest of src as a multipart upload to a
// temporary key, then copies it to its final key (no spool folder).
func (s *S3Store) putLarge(ctx context.Context, kind string, hr *hashingReader, src io.Reader, first []byte, opts PutOptions) (Object, error) {
	ct := contentType(opts.ContentType)
	tmpKey, err := s3TempKey()
	if err != nil {
		return Object{}, err
	}
	buf, data := first[:cap(first)], first
	next := func(off int64) (io.Reader, int64, error) {
		if off > 0 {
			n, err := readFull(src, buf)
			if err != nil {
				return nil, 0, fmt.Errorf("read content: %w", err)
			}
			data = buf[:n]
		}
		return bytes.NewReader(data), int64(len(data)), nil
	}
	// Completed before its content is checked: when that fails, or the final key
	// exists already, the deferred removal drops it.
	if err := s.multipart(ctx, tmpKey, minio.PutObjectOptions{ContentType: ct}, -1, next); err != nil {
		return Object{}, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s3CleanupTimeout)
		defer cancel()
		_ = s.client.RemoveObject(cctx, s.bucket, tmpKey, minio.RemoveObjectOptions{}) // best effort
	}()

	sum, digest, key, stored, err := s.address(ctx, kind, hr, opts)
	if err != nil || stored != nil {
		return deref(stored), err // stored already: the deferred removal drops our copy
	}
	if err := s.copyObject(ctx, tmpKey, key, hr.n, ct, sum); err != nil {
		return Object{}, err
	}
	return Object{Key: key, Digest: digest, SHA256: sum, Size: hr.n, ContentType: ct}, nil
}

// copyObject copies src to dst server-side, setting the metadata afresh.
func (s *S3Store) copyObject(ctx context.Context, src, dst string, size int64, ct, sum string) error {
	dstOpts := minio.CopyDestOptions{
		Bucket:          s.bucket,
		Object:          dst,
		ReplaceMetadata: true,
		// Content-Type in UserMetadata also reaches the multipart copy path of
		// ComposeObject, which ignores CopyDestOptions.ContentType.
		UserMetadata: map[string]string{"Content-Type": ct, s3MetaSHA256: sum},
	}
	srcOpts := minio.CopySrcOptions{Bucket: s.bucket, Object: src}
	var err error
	if size <= s3MaxCopySize {
		_, err = s.client.CopyObject(ctx, dstOpts, srcOpts)
	} else {
		_, err = s.client.ComposeObject(ctx, dstOpts, srcOpts)
	}
	if err != nil {
		return fmt.Errorf("copy %s to %s: %w", src, dst, s3Error(err))
	}
	return nil
}

// s3TempKey returns a fresh key under the temporary prefix.
func s3TempKey() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("temporary key: %w", err)
	}
	return s3TempPrefix + hex.EncodeToString(b[:]), nil
}

// Get implements Store.Get with one GET request; the returned reader is the
// response body.
func (s *S3Store) Get(ctx context.Context, key string, opts GetOptions) (io.ReadCloser, Object, error) {
	rc, obj, err := s.get(ctx, key, opts)
	if err != nil {
		return nil, Object{}, fmt.Errorf("get %s: %w", key, err)
	}
	return rc, obj, nil
}

func (s *S3Store) get(ctx context.Context, key string, opts GetOptions) (io.ReadCloser, Object, error) {
	if _, _, err := ParseKey(key); err != nil {
		return nil, Object{}, err
	}
	if opts.Offset < 0 || opts.Length < 0 {
		_, _, err := clampRange(opts, 0)
		return nil, Object{}, err
	}
	var gopts minio.GetObjectOptions
	ranged := opts.Offset > 0 || opts.Length > 0
	if ranged {
		// minio's SetRange takes an inclusive end, 0 meaning "to the end" when
		// the start is positive; with start 0 the end is always explicit.
		var end int64
		if opts.Length > 0 {
			end = opts.Offset + opts.Length - 1
			if end < opts.Offset { // overflow (only with Offset > 0): to the end
				end = 0
			}
		}
		if err := gopts.SetRange(opts.Offset, end); err != nil {
			return nil, Object{}, fmt.Errorf("%w: %w", ErrInvalidRange, err)
		}
	}

	body, info, hdr, err := s.core.GetObject(ctx, s.bucket, key, gopts)
	if err != nil {
		if ranged && isInvalidRange(err) {
			// Past the end, or an empty object: the size decides.
			obj, serr := s.stat(ctx, key)
			if serr != nil {
				return nil, Object{}, serr
			}
			if _, _, err := clampRange(opts, obj.Size); err != nil {
				return nil, Object{}, err
			}
			return io.NopCloser(bytes.NewReader(nil)), obj, nil
		}
		return nil, Object{}, s3Error(err)
	}
	obj, err := s.object(key, info)
	if err != nil {
		_ = body.Close()
		return nil, Object{}, err
	}
	if !ranged {
		return body, obj, nil
	}
	if total, ok := s3TotalSize(hdr.Get("Content-Range")); ok {
		obj.Size = total
		return body, obj, nil
	}
	// The server ignored the range and sent the whole object: skip and cut.
	off, n, err := clampRange(opts, obj.Size)
	if err == nil {
		_, err = io.CopyN(io.Discard, body, off)
	}
	if err != nil {
		_ = body.Close()
		return nil, Object{}, err
	}
	return readCloser{Reader: io.LimitReader(body, n), Closer: body}, obj, nil
}

// s3TotalSize reads the object's size from "bytes a-b/size".
func s3TotalSize(contentRange string) (int64, bool) {
	_, total, ok := strings.Cut(contentRange, "/")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(total, 10, 64)
	return n, err == nil && n >= 0
}

// object describes key from its response headers.
func (s *S3Store) object(key string, info minio.ObjectInfo) (Object, error) {
	_, digest, err := ParseKey(key)
	if err != nil {
		return Object{}, err
	}
	obj := Object{Key: key, Digest: digest, SHA256: digest, Size: info.Size, ContentType: contentType(info.ContentType)}
	if sum := info.Metadata.Get("X-Amz-Meta-" + s3MetaSHA256); sum != "" {
		obj.SHA256 = sum
	}
	return obj, nil
}

// Stat implements Store.Stat with a HEAD request.
func (s *S3Store) Stat(ctx context.Context, key string) (Object, error) {
	if _, _, err := ParseKey(key); err != nil {
		return Object{}, fmt.Errorf("stat: %w", err)
	}
	obj, err := s.stat(ctx, key)
	if err != nil {
		return Object{}, fmt.Errorf("stat %s: %w", key, err)
	}
	return obj, nil
}

func (s *S3Store) stat(ctx context.Context, key string) (Object, error) {
	info, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return Object{}, s3Error(err)
	}
	return s.object(key, info)
}

// Delete implements Store.Delete.
func (s *S3Store) Delete(ctx context.Context, key string) error {
	if _, _, err := ParseKey(key); err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	err := s.client.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{})
	if err != nil && !errors.Is(s3Error(err), ErrNotFound) {
		return fmt.Errorf("delete %s: %w", key, s3Error(err))
	}
	return nil
}

// PresignGet implements Store.PresignGet: a SigV4 presigned GET URL on the
// configured endpoint. expiry must be between 1s and 7 days.
func (s *S3Store) PresignGet(ctx context.Context, key string, expiry time.Duration) (string, error) {
	if _, _, err := ParseKey(key); err != nil {
		return "", fmt.Errorf("presign: %w", err)
	}
	if expiry < time.Second || expiry > s3MaxPresignExpiry {
		return "", fmt.Errorf("presign %s: expiry %s outside [1s, %s]", key, expiry, s3MaxPresignExpiry)
	}
	u, err := s.client.PresignedGetObject(ctx, s.bucket, key, expiry, nil)
	if err != nil {
		return "", fmt.Errorf("presign %s: %w", key, s3Error(err))
	}
	return u.String(), nil
}

// Ping implements Store.Ping: the server must answer and the bucket exist.
func (s *S3Store) Ping(ctx context.Context) error {
	ok, err := s.client.BucketExists(ctx, s.bucket)
	if err != nil {
		return fmt.Errorf("ping %s: %w", s, err)
	}
	if !ok {
		return fmt.Errorf("ping %s: bucket does not exist", s)
	}
	return nil
}
