package bundle

import (
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

// TestsDir is the folder of a bundle's test cases (`cairn test`), left out of the
// bundle by Scan.
const TestsDir = "tests"

// Scan reads the bundle folder dir and returns its Tree, applying the rules and limits
// of Extract: regular files, directories and relative symlinks resolving inside the
// folder only (a socket, FIFO or device fails the scan), canonical names without
// control characters or backslashes, cairn.yaml at the root, and lim. Directories named
// .git (and .git files, as in submodules) and .cairn (the data directory of `cairn
// dev`) are skipped at any depth, and so is the folder tests at the root: the cases of
// `cairn test` (docs/testing.md), which a run never reads, so that editing a test does
// not make a new version on deploy. Empty directories are not part of the tree. Files are
// hashed as they are read; ctx is checked between files and during reads.
//
// Errors about the folder's content match ErrInvalid; others are I/O errors. Scan is
// safe for concurrent use.
func Scan(ctx context.Context, dir string, lim Limits) (*Tree, error) {
	lim = lim.withDefaults()
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("scan bundle: %w", err)
	}
	defer root.Close()
	b := newBuilder(lim)
	buf := make([]byte, 32*KiB)
	h := sha256.New()
	err = fs.WalkDir(root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if name == "." {
			return nil
		}
		if base := d.Name(); base == ".git" || (d.IsDir() && (base == ".cairn" || name == TestsDir)) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if err := b.countEntry(); err != nil {
			return err
		}
		p, err := cleanEntryPath(name, lim)
		if err != nil {
			return err
		}
		switch t := d.Type(); {
		case t.IsDir():
			return b.claimDir(p)
		case t&fs.ModeSymlink != 0:
			target, err := root.Readlink(name)
			if err != nil {
				return err
			}
			if err := checkLinkTarget(p, target, lim); err != nil {
				return err
			}
			if err := b.claimLeaf(p, kindSymlink); err != nil {
				return err
			}
			b.add(symlinkEntry(p, target))
			return nil
		case t.IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			if err := b.reserve(p, info.Size()); err != nil {
				return err
			}
			if err := b.claimLeaf(p, kindFile); err != nil {
				return err
			}
			sum, err := hashFile(ctx, root, p, info.Size(), h, buf)
			if err != nil {
				return err
			}
			b.add(Entry{Path: p, Type: TypeFile, Mode: normalizeMode(info.Mode().Perm()), Size: info.Size(), SHA256: sum})
			return nil
		default:
			return entryError(p, "%ss are not allowed in a bundle", fileKind(t))
		}
	})
	if err != nil {
		var ve *ValidationError
		if errors.As(err, &ve) {
			return nil, ve
		}
		return nil, fmt.Errorf("scan bundle %q: %w", dir, err)
	}
	return b.tree()
}

// hashFile returns the hex SHA-256 of the file p, which must have size bytes.
func hashFile(ctx context.Context, root *os.Root, p string, size int64, h hash.Hash, buf []byte) (string, error) {
	f, err := root.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h.Reset()
	r := &limitReader{ctx: ctx, r: f, max: size, tooLarge: func() error { return fmt.Errorf("%q: %w", p, errChanged) }}
	n, err := io.CopyBuffer(h, r, buf)
	if err != nil {
		return "", err
	}
	if n != size {
		return "", fmt.Errorf("%q: %w", p, errChanged)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// fileKind names a file type for errors.
func fileKind(t fs.FileMode) string {
	switch {
	case t&fs.ModeSocket != 0:
		return "socket"
	case t&fs.ModeNamedPipe != 0:
		return "FIFO"
	case t&fs.ModeCharDevice != 0:
		return "character device"
	case t&fs.ModeDevice != 0:
		return "device"
	default:
		return t.Type().String()
	}
}

// LoadDir scans the bundle folder dir (see Scan) and parses, validates and normalizes
// its manifest, like Load does for an archive. `cairn deploy DIR` can use it to report
// errors before uploading anything. It is safe for concurrent use.
func LoadDir(ctx context.Context, dir string, lim Limits) (*Bundle, error) {
	t, err := Scan(ctx, dir, lim)
	if err != nil {
		return nil, err
	}
	return finish(dir, t, lim.withDefaults())
}

// Pack writes the canonical archive of the bundle folder dir to w and returns its
// digest. It validates the folder and its manifest first, with the default Limits (see
// LoadDir), so nothing is written for an invalid bundle; then it writes the archive
// (see WriteCanonical), failing if a file changes meanwhile. Pack does not close w.
// It is safe for concurrent use.
func Pack(ctx context.Context, dir string, w io.Writer) (digest string, err error) {
	b, err := LoadDir(ctx, dir, Limits{})
	if err != nil {
		return "", err
	}
	if err := WriteCanonical(ctx, dir, b.Tree, w); err != nil {
		return "", err
	}
	return b.Digest, nil
}

// Packing is the canonical archive of a bundle folder as it is packed (see
// PackStream): an io.ReadCloser of the archive's bytes.
type Packing struct {
	r    *io.PipeReader
	done chan struct{}
	err  error
}

// errPackingClosed ends a packing whose reader was closed before the end.
var errPackingClosed = errors.New("packing closed by its reader")

// PackStream packs the bundle folder dir (Pack) in a goroutine as the returned
// archive is read, so that the archive is never whole in memory or on disk: an
// upload's body, or Load's input. A folder Pack refuses ends the reading with
// Pack's error. Close stops the packing where the reader stopped and returns
// Pack's error, if any, the explanation to prefer to the reader's own.
func PackStream(ctx context.Context, dir string) *Packing {
	pr, pw := io.Pipe()
	p := &Packing{r: pr, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		_, err := Pack(ctx, dir, pw)
		pw.CloseWithError(err)
		if err != nil && !errors.Is(err, errPackingClosed) {
			p.err = err
		}
	}()
	return p
}

// Read reads the archive.
func (p *Packing) Read(b []byte) (int, error) { return p.r.Read(b) }

// Close stops the packing if it is not over, waits for it, and returns Pack's
// error (nil when the folder packed, or when Close stopped it). Close is safe to
// call twice.
func (p *Packing) Close() error {
	p.r.CloseWithError(errPackingClosed)
	<-p.done
	return p.err
}
