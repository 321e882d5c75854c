package blobstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
)

// Listed is an object as a listing shows it.
type Listed struct {
	// Key is the object's name: "<kind>/sha256/<hex>" or "<kind>/u/<hex>".
	Key string
	// Size is the length of the object's bytes.
	Size int64
	// ModTime is when the object was stored (S3's LastModified, the file's
	// modification time).
	ModTime time.Time
}

// TempReport counts the leftovers of crashed or abandoned Puts that CleanTemp
// removed (or would remove, in a dry run).
type TempReport struct {
	// Objects and Bytes count temporary objects (files under <root>/.tmp, S3
	// objects under ".tmp/").
	Objects int
	Bytes   int64
	// Uploads and UploadBytes count incomplete S3 multipart uploads (always 0 for
	// the file backend); UploadBytes is what the server reports of their parts.
	Uploads     int
	UploadBytes int64
}

// Both backends list and clean up.
var (
	_ Lister = (*FileStore)(nil)
	_ Lister = (*S3Store)(nil)
)

// Lister is what the garbage collector needs of a store besides Delete. FileStore
// and S3Store implement it.
type Lister interface {
	// List yields every object of kind, in no particular order, then stops; an
	// error ends the sequence. Objects stored or deleted during the listing may
	// or may not appear.
	List(ctx context.Context, kind string) iter.Seq2[Listed, error]
	// CleanTemp removes the leftovers of Puts that crashed or were abandoned:
	// temporary objects and incomplete multipart uploads started before before.
	// With dryRun it removes nothing and reports what it would remove. before
	// must be older than the longest upload, since another process may be
	// uploading.
	CleanTemp(ctx context.Context, before time.Time, dryRun bool) (TempReport, error)
}

// List implements Lister.List: the files of <root>/<kind>/sha256 but the
// sidecars.
func (s *FileStore) List(ctx context.Context, kind string) iter.Seq2[Listed, error] {
	return func(yield func(Listed, error) bool) {
		if err := checkKind(kind); err != nil {
			yield(Listed{}, fmt.Errorf("list: %w", err))
			return
		}
		dir := filepath.Join(s.root, kind, "sha256")
		entries, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			return
		}
		if err != nil {
			yield(Listed{}, fmt.Errorf("list %s: %w", kind, err))
			return
		}
		for _, e := range entries {
			if err := ctx.Err(); err != nil {
				yield(Listed{}, fmt.Errorf("list %s: %w", kind, err))
				return
			}
			key := kind + keyAlgo + e.Name()
			if _, _, err := ParseKey(key); err != nil || !e.Type().IsRegular() {
				continue // a sidecar, or not ours
			}
			info, err := e.Info()
			if errors.Is(err, fs.ErrNotExist) {
				continue // deleted since
			}
			if err != nil {
				yield(Listed{}, fmt.Errorf("list %s: %w", kind, err))
				return
			}
			if !yield(Listed{Key: key, Size: info.Size(), ModTime: info.ModTime()}, nil) {
				return
			}
		}
	}
}

// CleanTemp implements Lister.CleanTemp: the files of <root>/.tmp last
// modified before before.
func (s *FileStore) CleanTemp(ctx context.Context, before time.Time, dryRun bool) (TempReport, error) {
	var rep TempReport
	entries, err := os.ReadDir(s.tmp)
	if err != nil {
		return rep, fmt.Errorf("list temporary files: %w", err)
	}
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		info, err := e.Info()
		if err != nil || info.IsDir() || !info.ModTime().Before(before) {
			continue // gone already, or not ours to judge, or recent
		}
		if !dryRun {
			if err := os.Remove(filepath.Join(s.tmp, e.Name())); errors.Is(err, fs.ErrNotExist) {
				continue
			} else if err != nil {
				return rep, fmt.Errorf("remove stale temporary file: %w", err)
			}
		}
		rep.Objects++
		rep.Bytes += info.Size()
	}
	return rep, nil
}

// List implements Lister.List with ListObjects on "<kind>/": content
// addresses and keys of their own ("<kind>/u/<hex>") alike.
func (s *S3Store) List(ctx context.Context, kind string) iter.Seq2[Listed, error] {
	return func(yield func(Listed, error) bool) {
		if err := checkKind(kind); err != nil {
			yield(Listed{}, fmt.Errorf("list: %w", err))
			return
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel() // stops minio's lister when the caller stops early
		for info := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: kind + "/", Recursive: true}) {
			if info.Err != nil {
				yield(Listed{}, fmt.Errorf("list %s: %w", kind, s3Error(info.Err)))
				return
			}
			if _, _, err := ParseKey(info.Key); err != nil {
				continue // not ours
			}
			if !yield(Listed{Key: info.Key, Size: info.Size, ModTime: info.LastModified}, nil) {
				return
			}
		}
	}
}

// CleanTemp implements Lister.CleanTemp: the objects under ".tmp/" last
// modified before before, and the multipart uploads to ".tmp/" keys and to keys
// of kinds (a spooled Put uploads to its final key) initiated before it
// (aborted, which frees their parts).
func (s *S3Store) CleanTemp(ctx context.Context, before time.Time, dryRun bool) (TempReport, error) {
	var rep TempReport
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for info := range s.client.ListObjects(lctx, s.bucket, minio.ListObjectsOptions{Prefix: s3TempPrefix, Recursive: true}) {
		if info.Err != nil {
			return rep, fmt.Errorf("list temporary objects: %w", s3Error(info.Err))
		}
		if !strings.HasPrefix(info.Key, s3TempPrefix) || !info.LastModified.Before(before) {
			continue
		}
		if !dryRun {
			if err := s.client.RemoveObject(ctx, s.bucket, info.Key, minio.RemoveObjectOptions{}); err != nil && !errors.Is(s3Error(err), ErrNotFound) {
				return rep, fmt.Errorf("remove temporary object %s: %w", info.Key, s3Error(err))
			}
		}
		rep.Objects++
		rep.Bytes += info.Size
	}
	for up := range s.client.ListIncompleteUploads(lctx, s.bucket, "", true) {
		if up.Err != nil {
			return rep, fmt.Errorf("list incomplete uploads: %w", s3Error(up.Err))
		}
		if !up.Initiated.Before(before) {
			continue
		}
		if _, _, err := ParseKey(up.Key); err != nil && !strings.HasPrefix(up.Key, s3TempPrefix) {
			continue // not ours
		}
		if !dryRun {
			if err := s.core.AbortMultipartUpload(ctx, s.bucket, up.Key, up.UploadID); err != nil && !isNoSuchUpload(err) {
				return rep, fmt.Errorf("abort upload of %s: %w", up.Key, s3Error(err))
			}
		}
		rep.Uploads++
		rep.UploadBytes += up.Size
	}
	return rep, nil
}

// isNoSuchUpload reports an upload that was completed or aborted meanwhile.
func isNoSuchUpload(err error) bool {
	var resp minio.ErrorResponse
	return errors.As(err, &resp) && resp.Code == "NoSuchUpload"
}
