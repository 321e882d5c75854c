package bundle

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"math"
	"os"
	"time"
)

// CanonicalGzipLevel is the compression level of canonical archives.
const CanonicalGzipLevel = gzip.DefaultCompression

// canonicalModTime is the modification time of every entry of a canonical archive.
var canonicalModTime = time.Unix(0, 0).UTC()

// WriteCanonical writes the canonical archive of the bundle extracted (or found) in dir,
// whose Tree is t, to w: a gzip-compressed tar holding t's entries in path order, files
// and symlinks only (directories are implied), with uid and gid 0, empty user and group
// names, modification time 1970-01-01T00:00:00Z, modes 0644, 0755 or 0777, in PAX
// format (records only where USTAR cannot hold a field, such as a long path), gzip
// level CanonicalGzipLevel with an empty header (no name, zero time).
//
// The bytes depend only on t and the Go version (its tar and flate encoders); the
// digest does not depend on the bytes at all but on the tree (see Tree.Digest), so a
// different gzip implementation never changes it.
//
// Each file's content is read from dir and checked against t as it is written: a file
// that changed since t was made fails the call with an error (the output is then
// incomplete and must be discarded). ctx is checked between entries and during reads.
// WriteCanonical does not close w. It is safe for concurrent use.
func WriteCanonical(ctx context.Context, dir string, t *Tree, w io.Writer) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("write canonical archive: %w", err)
	}
	defer root.Close()
	zw, err := gzip.NewWriterLevel(w, CanonicalGzipLevel)
	if err != nil {
		return fmt.Errorf("write canonical archive: %w", err)
	}
	tw := tar.NewWriter(zw)
	buf := make([]byte, 32*KiB)
	h := sha256.New()
	prev := ""
	for i, e := range t.Entries {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("write canonical archive: %w", err)
		}
		if i > 0 && e.Path <= prev {
			return fmt.Errorf("write canonical archive: entry %q: entries not sorted or duplicate", e.Path)
		}
		prev = e.Path
		// A Tree from this package is valid; a hand-made one must not smuggle a
		// hostile path into an archive that others will extract.
		if p, err := cleanEntryPath(e.Path, anyPathLength); err != nil || p != e.Path || p == "" {
			return fmt.Errorf("write canonical archive: entry %q: invalid path", e.Path)
		}
		hdr := &tar.Header{
			Name:    e.Path,
			Mode:    int64(e.Mode.Perm()),
			ModTime: canonicalModTime,
			Format:  tar.FormatPAX,
		}
		switch e.Type {
		case TypeFile:
			if e.Mode != ModeFile && e.Mode != ModeExec {
				return fmt.Errorf("write canonical archive: entry %q: mode %04o is not normalized", e.Path, e.Mode)
			}
			hdr.Typeflag = tar.TypeReg
			hdr.Size = e.Size
		case TypeSymlink:
			if err := checkLinkTarget(e.Path, e.Target, anyPathLength); err != nil {
				return fmt.Errorf("write canonical archive: %w", err)
			}
			hdr.Typeflag = tar.TypeSymlink
			hdr.Mode = int64(ModeSymlink)
			hdr.Linkname = e.Target
		default:
			return fmt.Errorf("write canonical archive: entry %q: unknown type %q", e.Path, e.Type)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("write canonical archive: entry %q: %w", e.Path, err)
		}
		if e.Type != TypeFile {
			continue
		}
		if err := copyChecked(ctx, root, e, tw, h, buf); err != nil {
			return fmt.Errorf("write canonical archive: entry %q: %w", e.Path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("write canonical archive: %w", err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("write canonical archive: %w", err)
	}
	return nil
}

// anyPathLength checks paths without a length limit: the tree was made under limits
// that may differ from the defaults.
var anyPathLength = Limits{MaxPathLength: math.MaxInt}

// errChanged reports a file whose content no longer matches its Tree entry.
var errChanged = errors.New("file changed since the bundle was read")

// copyChecked copies the content of the file entry e from root to w, checking its size
// and hash against e.
func copyChecked(ctx context.Context, root *os.Root, e Entry, w io.Writer, h hash.Hash, buf []byte) error {
	f, err := root.Open(e.Path)
	if err != nil {
		return err
	}
	defer f.Close()
	h.Reset()
	r := &limitReader{ctx: ctx, r: f, max: e.Size, tooLarge: func() error { return errChanged }}
	n, err := io.CopyBuffer(io.MultiWriter(w, h), r, buf)
	if err != nil {
		return err
	}
	if n != e.Size || hex.EncodeToString(h.Sum(nil)) != e.SHA256 {
		return errChanged
	}
	return nil
}
