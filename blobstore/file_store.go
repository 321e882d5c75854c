package blobstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// File layout under the root:
//
//	<root>/<kind>/sha256/<hex>       the object's bytes
//	<root>/<kind>/sha256/<hex>.meta  JSON sidecar: content type, sha256 of the bytes
//	<root>/.tmp/                     uploads in progress (same filesystem, so rename is atomic)
//
// The ".tmp" name cannot collide with a kind: kinds start with a letter.
const (
	fileTempDir    = ".tmp"
	fileMetaSuffix = ".meta"
	fileDirPerm    = 0o700
	filePerm       = 0o600
)

// FileConfig tunes a FileStore. A nil *FileConfig means the defaults.
type FileConfig struct {
	// TempMaxAge is the age past which NewFile deletes temporary files left in
	// <root>/.tmp by Puts that crashed. Default 24h; it must be longer than any
	// single upload, since another process may share the root.
	TempMaxAge time.Duration
}

func (c *FileConfig) withDefaults() FileConfig {
	var out FileConfig
	if c != nil {
		out = *c
	}
	if out.TempMaxAge == 0 {
		out.TempMaxAge = 24 * time.Hour
	}
	return out
}

// FileStore is a Store on a local directory, for development and tests. Objects
// are written to a temporary file while hashed, synced, then renamed into place,
// so a reader sees the whole object or none. Files and directories are private to
// the user (0600/0700). It is safe for concurrent use, also by several processes
// sharing the root. PresignGet returns ErrNotSupported.
type FileStore struct {
	root string
	tmp  string
}

// metaFile is the JSON sidecar of an object.
type metaFile struct {
	ContentType string `json:"content_type"`
	SHA256      string `json:"sha256"`
}

// NewFile opens (creating it if needed) a FileStore rooted at root, and removes
// temporary files older than cfg.TempMaxAge. A nil cfg means defaults. It returns
// an error if the root cannot be created or cfg is invalid.
func NewFile(root string, cfg *FileConfig) (*FileStore, error) {
	c := cfg.withDefaults()
	if c.TempMaxAge < 0 {
		return nil, fmt.Errorf("new file store: negative TempMaxAge %s", c.TempMaxAge)
	}
	if root == "" {
		return nil, errors.New("new file store: empty root")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("new file store %q: %w", root, err)
	}
	s := &FileStore{root: abs, tmp: filepath.Join(abs, fileTempDir)}
	if err := os.MkdirAll(s.tmp, fileDirPerm); err != nil {
		return nil, fmt.Errorf("new file store %q: %w", root, err)
	}
	if err := s.removeStaleTemps(c.TempMaxAge); err != nil {
		return nil, fmt.Errorf("new file store %q: %w", root, err)
	}
	return s, nil
}

// removeStaleTemps deletes temporary files older than maxAge.
func (s *FileStore) removeStaleTemps(maxAge time.Duration) error {
	entries, err := os.ReadDir(s.tmp)
	if err != nil {
		return fmt.Errorf("list temporary files: %w", err)
	}
	cutoff := time.Now().Add(-maxAge)
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || info.IsDir() || info.ModTime().After(cutoff) {
			continue // gone already, or not ours to judge, or recent
		}
		if err := os.Remove(filepath.Join(s.tmp, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove stale temporary file: %w", err)
		}
	}
	return nil
}

// Root returns the absolute directory the store keeps its files in.
func (s *FileStore) Root() string { return s.root }

// path returns the data file of a valid key.
func (s *FileStore) path(key string) string {
	return filepath.Join(s.root, filepath.FromSlash(key))
}

// Put implements Store.Put. The content goes to a temporary file in <root>/.tmp
// while hashed, is synced, its sidecar is written, and it is renamed into place;
// the directory is synced after. If the object exists, the temporary file is
// dropped and the existing object returned.
func (s *FileStore) Put(ctx context.Context, kind string, r io.Reader, opts PutOptions) (Object, error) {
	return putOnce(ctx, kind, r, opts, s.Stat, s.put)
}

func (s *FileStore) put(ctx context.Context, kind string, r io.Reader, opts PutOptions) (obj Object, err error) {
	f, err := os.CreateTemp(s.tmp, "put-*")
	if err != nil {
		return Object{}, fmt.Errorf("create temporary file: %w", err)
	}
	tmpName := f.Name()
	defer func() {
		if f != nil {
			_ = f.Close()
		}
		if tmpName != "" {
			_ = os.Remove(tmpName) // best effort; NewFile sweeps what is left
		}
	}()

	hr := newHashingReader(r, opts.Size)
	if _, err := io.Copy(f, ctxReader{ctx: ctx, r: hr}); err != nil {
		return Object{}, fmt.Errorf("copy content: %w", err)
	}
	sum, digest, key, err := hr.identify(kind, opts)
	if err != nil {
		return Object{}, err
	}
	obj = Object{Key: key, Digest: digest, SHA256: sum, Size: hr.n, ContentType: contentType(opts.ContentType)}
	if err := opts.claim(ctx, key); err != nil {
		return Object{}, err
	}

	final := s.path(key)
	if _, err := os.Lstat(final); err == nil {
		return s.Stat(ctx, key) // already stored: the deferred cleanup drops ours
	} else if !errors.Is(err, fs.ErrNotExist) {
		return Object{}, fmt.Errorf("check existing: %w", err)
	}

	if err := f.Sync(); err != nil {
		return Object{}, fmt.Errorf("sync: %w", err)
	}
	err = f.Close()
	f = nil
	if err != nil {
		return Object{}, fmt.Errorf("close: %w", err)
	}
	dir := filepath.Dir(final)
	if err := os.MkdirAll(dir, fileDirPerm); err != nil {
		return Object{}, fmt.Errorf("create directory: %w", err)
	}
	// The sidecar lands first, so that whoever sees the data also sees its metadata.
	if err := s.writeMeta(final+fileMetaSuffix, metaFile{ContentType: obj.ContentType, SHA256: sum}); err != nil {
		return Object{}, err
	}
	if err := os.Rename(tmpName, final); err != nil {
		return Object{}, fmt.Errorf("rename into place: %w", err)
	}
	tmpName = ""
	if err := syncDir(dir); err != nil {
		return Object{}, err
	}
	return obj, nil
}

// writeMeta writes the sidecar atomically (temporary file, sync, rename).
func (s *FileStore) writeMeta(path string, m metaFile) (err error) {
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode metadata: %w", err)
	}
	f, err := os.CreateTemp(s.tmp, "meta-*")
	if err != nil {
		return fmt.Errorf("create metadata: %w", err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(b); err != nil {
		return fmt.Errorf("write metadata: %w", err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("sync metadata: %w", err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("close metadata: %w", err)
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("rename metadata: %w", err)
	}
	return nil
}

// readMeta returns the sidecar of the object at path, or defaults when it is
// missing (an object whose sidecar a concurrent Delete removed).
func readMeta(path, digest string) (metaFile, error) {
	m := metaFile{ContentType: DefaultContentType, SHA256: digest}
	b, err := os.ReadFile(path + fileMetaSuffix)
	if errors.Is(err, fs.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return metaFile{}, fmt.Errorf("read metadata: %w", err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return metaFile{}, fmt.Errorf("decode metadata: %w", err)
	}
	return m, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory: %w", err)
	}
	return nil
}

// object describes the object at key whose data file has size bytes.
func (s *FileStore) object(key string, size int64) (Object, error) {
	_, digest, err := ParseKey(key)
	if err != nil {
		return Object{}, err
	}
	m, err := readMeta(s.path(key), digest)
	if err != nil {
		return Object{}, err
	}
	return Object{Key: key, Digest: digest, SHA256: m.SHA256, Size: size, ContentType: m.ContentType}, nil
}

// fileError translates an os error about key at the backend's edge.
func fileError(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return ErrNotFound
	}
	return err
}

// Get implements Store.Get. The reader is a section of the open file, so a
// concurrent Delete does not cut it short.
func (s *FileStore) Get(ctx context.Context, key string, opts GetOptions) (io.ReadCloser, Object, error) {
	if _, _, err := ParseKey(key); err != nil {
		return nil, Object{}, fmt.Errorf("get: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, Object{}, fmt.Errorf("get %s: %w", key, err)
	}
	f, err := os.Open(s.path(key))
	if err != nil {
		return nil, Object{}, fmt.Errorf("get %s: %w", key, fileError(err))
	}
	rc, obj, err := s.open(f, key, opts)
	if err != nil {
		_ = f.Close()
		return nil, Object{}, fmt.Errorf("get %s: %w", key, err)
	}
	return rc, obj, nil
}

func (s *FileStore) open(f *os.File, key string, opts GetOptions) (io.ReadCloser, Object, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, Object{}, err
	}
	obj, err := s.object(key, fi.Size())
	if err != nil {
		return nil, Object{}, err
	}
	off, n, err := clampRange(opts, obj.Size)
	if err != nil {
		return nil, Object{}, err
	}
	return readCloser{Reader: io.NewSectionReader(f, off, n), Closer: f}, obj, nil
}

// Stat implements Store.Stat.
func (s *FileStore) Stat(ctx context.Context, key string) (Object, error) {
	if _, _, err := ParseKey(key); err != nil {
		return Object{}, fmt.Errorf("stat: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return Object{}, fmt.Errorf("stat %s: %w", key, err)
	}
	fi, err := os.Stat(s.path(key))
	if err != nil {
		return Object{}, fmt.Errorf("stat %s: %w", key, fileError(err))
	}
	obj, err := s.object(key, fi.Size())
	if err != nil {
		return Object{}, fmt.Errorf("stat %s: %w", key, err)
	}
	return obj, nil
}

// Delete implements Store.Delete: the data file goes first, then its sidecar.
func (s *FileStore) Delete(ctx context.Context, key string) error {
	if _, _, err := ParseKey(key); err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	p := s.path(key)
	for _, name := range []string{p, p + fileMetaSuffix} {
		if err := os.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("delete %s: %w", key, err)
		}
	}
	return nil
}

// PresignGet implements Store.PresignGet: local files have no URLs, so it returns
// ErrNotSupported (or ErrInvalidKey).
func (s *FileStore) PresignGet(_ context.Context, key string, _ time.Duration) (string, error) {
	if _, _, err := ParseKey(key); err != nil {
		return "", fmt.Errorf("presign: %w", err)
	}
	return "", fmt.Errorf("presign %s: %w", key, ErrNotSupported)
}

// Ping implements Store.Ping: the root must exist and take a new file.
func (s *FileStore) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ping file store: %w", err)
	}
	f, err := os.CreateTemp(s.tmp, "ping-*")
	if err != nil {
		return fmt.Errorf("ping file store %s: %w", s.root, err)
	}
	name := f.Name()
	_ = f.Close()
	if err := os.Remove(name); err != nil {
		return fmt.Errorf("ping file store %s: %w", s.root, err)
	}
	return nil
}

// String describes the store for logs.
func (s *FileStore) String() string {
	return "file://" + filepath.ToSlash(s.root)
}
