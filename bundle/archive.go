package bundle

import (
	"archive/tar"
	"compress/flate"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
)

// Extract reads a bundle archive (gzip-compressed tar) from r as a stream, validates
// every entry before writing it, and writes the bundle's files into dir. It returns the
// bundle's Tree. It does not parse the manifest beyond checking that cairn.yaml exists
// and is within MaxManifestSize; Load does the rest.
//
// r is read once, front to back, and never buffered whole: memory use is bounded by a
// few buffers whatever the archive's size. On success r has been read to its end (the
// gzip checksum is verified). On a limit violation reading stops at once, after at most
// the limit's worth of data: a small gzip that expands to gigabytes is not inflated
// beyond the limits. ctx is checked between entries and on every read.
//
// dir must be empty or not exist; it is created if needed and owned by the caller, who
// removes it, in particular after an error, when it may hold part of the bundle. Files
// are created with mode 0644 or 0755 (exactly, regardless of umask), directories
// with 0755 (minus umask); symlinks are created last, after every entry was checked.
// Nothing is written outside dir: paths are checked first, and writes go through an
// os.Root that refuses to leave dir.
//
// An archive is rejected, with a *ValidationError matching ErrInvalid, when it is not
// gzip or not tar, is corrupt or truncated, or has an entry that: has an absolute path,
// a ".." component, a non-canonical path ("a//b"), control characters or a backslash;
// is a duplicate or conflicts with another entry (a file below a file or a symlink);
// is a symlink whose target is absolute, leaves the bundle, or does not resolve to a
// file or directory of the bundle; is a hard link to anything but an earlier regular
// file (such a link is extracted as a copy); is a device, FIFO, sparse file or any
// other type. A missing cairn.yaml is rejected too. Exceeding a limit is rejected with
// an error also matching ErrTooLarge. Other errors (reading r, writing dir, ctx) do not
// match ErrInvalid.
//
// Extract is safe for concurrent use with distinct dirs.
func Extract(ctx context.Context, r io.Reader, dir string, lim Limits) (*Tree, error) {
	lim = lim.withDefaults()
	if err := prepareDir(dir); err != nil {
		return nil, fmt.Errorf("extract bundle: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("extract bundle: %w", err)
	}
	defer root.Close()
	x := &extractor{
		ctx:  ctx,
		root: root,
		lim:  lim,
		b:    newBuilder(lim),
		buf:  make([]byte, 32*KiB),
		hash: sha256.New(),
	}
	t, err := x.run(r)
	if err != nil {
		var ve *ValidationError
		if errors.As(err, &ve) {
			return nil, err
		}
		return nil, fmt.Errorf("extract bundle: %w", err)
	}
	return t, nil
}

// prepareDir creates dir if needed and checks that it is empty.
func prepareDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if len(names) > 0 {
		return fmt.Errorf("directory %q is not empty", dir)
	}
	return nil
}

// extractor holds the state of one Extract call.
type extractor struct {
	ctx  context.Context
	root *os.Root
	lim  Limits
	b    *builder
	buf  []byte
	hash hash.Hash
}

func (x *extractor) run(r io.Reader) (*Tree, error) {
	compressed := &limitReader{ctx: x.ctx, r: r, max: x.lim.MaxArchiveSize, source: true,
		tooLarge: func() error {
			return tooLarge("", "compressed archive is larger than the %s limit", formatSize(x.lim.MaxArchiveSize))
		}}
	zr, err := gzip.NewReader(compressed)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, archiveError("archive is empty")
		}
		return nil, formatError(err, "archive is not gzip-compressed")
	}
	stream := &limitReader{ctx: x.ctx, r: zr, max: x.lim.maxStreamSize(),
		tooLarge: func() error {
			return tooLarge("", "uncompressed archive is larger than %s, headers and padding included", formatSize(x.lim.maxStreamSize()))
		}}
	tr := tar.NewReader(stream)
	for first := true; ; first = false {
		if err := x.ctx.Err(); err != nil {
			return nil, err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		// ErrInsecurePath (with GODEBUG=tarinsecurepath=0) comes with a valid header;
		// our own path checks then reject the entry with a precise message.
		if err != nil && !errors.Is(err, tar.ErrInsecurePath) {
			if first && errors.Is(err, tar.ErrHeader) {
				return nil, formatError(err, "archive is not a tar archive")
			}
			return nil, formatError(err, "")
		}
		if err := x.b.countEntry(); err != nil {
			return nil, err
		}
		if err := x.entry(hdr, tr); err != nil {
			return nil, err
		}
	}
	// Read what follows the end of the tar archive, boundedly: tar tools pad to a
	// record size; reaching EOF verifies the gzip checksum and consumes r.
	n, err := io.CopyBuffer(io.Discard, io.LimitReader(stream, trailingSlack+1), x.buf)
	if err != nil {
		return nil, formatError(err, "")
	}
	if n > trailingSlack {
		return nil, archiveError("archive has more than %s of data after the end of the tar archive", formatSize(trailingSlack))
	}
	t, err := x.b.tree()
	if err != nil {
		return nil, err
	}
	// Symlinks are created last: every entry is known and every link checked, and no
	// file was written below a link (claimParents refuses it).
	for _, e := range t.Entries {
		if e.Type != TypeSymlink {
			continue
		}
		if err := x.ctx.Err(); err != nil {
			return nil, err
		}
		if err := x.mkdirParent(e.Path); err != nil {
			return nil, err
		}
		if err := x.root.Symlink(e.Target, e.Path); err != nil {
			return nil, fmt.Errorf("create symlink %q: %w", e.Path, err)
		}
	}
	return t, nil
}

// entry validates and writes one archive entry.
func (x *extractor) entry(hdr *tar.Header, tr io.Reader) error {
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		// A PAX global header (git archive writes one with the commit ID) carries
		// defaults that nothing of a bundle uses.
		return nil
	}
	p, err := cleanEntryPath(hdr.Name, x.lim)
	if err != nil {
		return err
	}
	shown := p
	if shown == "" {
		shown = hdr.Name
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		if p == "" {
			return nil
		}
		return x.b.claimDir(p)
	case tar.TypeReg:
		if p == "" || hdr.Name[len(hdr.Name)-1] == '/' {
			return entryError(shown, "regular file has a directory name")
		}
		if err := x.b.reserve(p, hdr.Size); err != nil {
			return err
		}
		if err := x.b.claimLeaf(p, kindFile); err != nil {
			return err
		}
		mode := normalizeMode(fs.FileMode(hdr.Mode))
		sum, err := x.writeFile(p, mode, tr, hdr.Size)
		if err != nil {
			return err
		}
		x.b.add(Entry{Path: p, Type: TypeFile, Mode: mode, Size: hdr.Size, SHA256: sum})
		return nil
	case tar.TypeSymlink:
		if p == "" {
			return entryError(shown, "symlink names the bundle root")
		}
		if err := checkLinkTarget(p, hdr.Linkname, x.lim); err != nil {
			return err
		}
		if err := x.b.claimLeaf(p, kindSymlink); err != nil {
			return err
		}
		x.b.add(symlinkEntry(p, hdr.Linkname))
		return nil
	case tar.TypeLink:
		return x.hardLink(p, shown, hdr.Linkname)
	default:
		return entryError(shown, "%s entries are not allowed", typeName(hdr.Typeflag))
	}
}

// hardLink extracts a hard link to an earlier regular file as a copy of it.
func (x *extractor) hardLink(p, shown, linkname string) error {
	if p == "" {
		return entryError(shown, "hard link names the bundle root")
	}
	target, err := cleanEntryPath(linkname, x.lim)
	if err != nil {
		var ve *ValidationError
		errors.As(err, &ve)
		return entryError(p, "hard link target %q: %s", linkname, ve.Message)
	}
	src, ok := x.b.file(target)
	if !ok {
		return entryError(p, "hard link target %q is not an earlier regular file of the bundle", linkname)
	}
	if err := x.b.reserve(p, src.Size); err != nil {
		return err
	}
	if err := x.b.claimLeaf(p, kindFile); err != nil {
		return err
	}
	f, err := x.root.Open(src.Path)
	if err != nil {
		return fmt.Errorf("open %q: %w", src.Path, err)
	}
	defer f.Close()
	sum, err := x.writeFile(p, src.Mode, f, src.Size)
	if err != nil {
		return err
	}
	if sum != src.SHA256 {
		return fmt.Errorf("copy %q to %q: content changed", src.Path, p)
	}
	x.b.add(Entry{Path: p, Type: TypeFile, Mode: src.Mode, Size: src.Size, SHA256: sum})
	return nil
}

// writeFile creates the new file p with mode and copies size bytes from r into it,
// returning the hex SHA-256 of the content.
func (x *extractor) writeFile(p string, mode fs.FileMode, r io.Reader, size int64) (string, error) {
	if err := x.mkdirParent(p); err != nil {
		return "", err
	}
	f, err := x.root.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("create %q: %w", p, err)
	}
	x.hash.Reset()
	n, err := io.CopyBuffer(io.MultiWriter(f, x.hash), io.LimitReader(r, size), x.buf)
	if err == nil && n != size {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		f.Close()
		var pathErr *fs.PathError
		if errors.As(err, &pathErr) {
			// Writing dir (or, for a hard link, reading the copied file) failed.
			return "", fmt.Errorf("write %q: %w", p, err)
		}
		return "", formatError(err, "")
	}
	// Chmod on the open file: exact mode whatever the umask, and no path lookup.
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return "", fmt.Errorf("chmod %q: %w", p, err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("write %q: %w", p, err)
	}
	return hex.EncodeToString(x.hash.Sum(nil)), nil
}

// mkdirParent creates the directories above p.
func (x *extractor) mkdirParent(p string) error {
	d := parentDir(p)
	if d == "" {
		return nil
	}
	if err := x.root.MkdirAll(d, 0o755); err != nil {
		return fmt.Errorf("create directory %q: %w", d, err)
	}
	return nil
}

// limitReader reads from r until max bytes, then fails with tooLarge(); it also fails
// once ctx is done. With source set, errors of r other than io.EOF are wrapped in a
// sourceError, so that they can be told from format errors of gzip and tar.
type limitReader struct {
	ctx      context.Context
	r        io.Reader
	n, max   int64
	source   bool
	tooLarge func() error
}

func (l *limitReader) Read(p []byte) (int, error) {
	if err := l.ctx.Err(); err != nil {
		return 0, sourceError{err}
	}
	if l.n > l.max {
		return 0, l.tooLarge()
	}
	// Read at most one byte past the limit: enough to know it was exceeded.
	if rest := l.max - l.n + 1; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := l.r.Read(p)
	l.n += int64(n)
	if l.n > l.max {
		return 0, l.tooLarge()
	}
	if err != nil && l.source && !errors.Is(err, io.EOF) {
		err = sourceError{err}
	}
	return n, err
}

// sourceError marks an error of the archive's reader (or ctx), not of its format.
type sourceError struct{ err error }

func (e sourceError) Error() string { return "read archive: " + e.err.Error() }
func (e sourceError) Unwrap() error { return e.err }

// formatError classifies an error met while decompressing or reading the archive:
// ValidationErrors and sourceErrors pass through, the rest is the archive's fault and
// becomes a ValidationError (with message, if given, or a description of err).
func formatError(err error, message string) error {
	var ve *ValidationError
	var se sourceError
	var corrupt flate.CorruptInputError
	switch {
	case errors.As(err, &ve):
		return ve
	case errors.As(err, &se):
		return se
	case message != "":
		return archiveError("%s", message)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return archiveError("archive is truncated")
	case errors.Is(err, gzip.ErrChecksum):
		return archiveError("archive is corrupt: gzip checksum mismatch")
	case errors.Is(err, gzip.ErrHeader):
		return archiveError("archive is corrupt: invalid gzip header (trailing data after the gzip stream?)")
	case errors.As(err, &corrupt):
		return archiveError("archive is corrupt: invalid deflate data at offset %d", int64(corrupt))
	case errors.Is(err, tar.ErrHeader):
		return archiveError("archive is corrupt: invalid tar header")
	default:
		return archiveError("archive is corrupt: %v", err)
	}
}

// typeName names a tar entry type in error messages.
func typeName(flag byte) string {
	switch flag {
	case tar.TypeChar:
		return "character device"
	case tar.TypeBlock:
		return "block device"
	case tar.TypeFifo:
		return "FIFO"
	case tar.TypeCont:
		return "contiguous file"
	case tar.TypeGNUSparse:
		return "sparse file"
	case tar.TypeXHeader:
		return "PAX header"
	case tar.TypeGNULongName, tar.TypeGNULongLink:
		return "GNU long name"
	default:
		return fmt.Sprintf("type %q", flag)
	}
}
