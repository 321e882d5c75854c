package bundle

import "fmt"

const (
	// KiB, MiB and GiB are byte counts, for writing limits.
	KiB int64 = 1 << 10
	// MiB is 1024 KiB.
	MiB int64 = 1 << 20
	// GiB is 1024 MiB.
	GiB int64 = 1 << 30
)

// Default limits; see Limits.
const (
	DefaultMaxEntries      = 10_000    // entries per archive
	DefaultMaxFileSize     = 512 * MiB // uncompressed bytes per file
	DefaultMaxTotalSize    = 1 * GiB   // uncompressed bytes of all files
	DefaultMaxManifestSize = 1 * MiB   // bytes of cairn.yaml
	DefaultMaxPathLength   = 1024      // bytes per path or symlink target
	DefaultMaxSteps        = 5_000     // steps per workflow
	// archiveSlack is what DefaultMaxArchiveSize allows beyond MaxTotalSize: tar
	// headers, padding and incompressible content.
	archiveSlack = 64 * MiB
)

// Limits bounds what a bundle may contain, so that a hostile upload (a decompression
// bomb, millions of entries, a huge manifest) is rejected early with an error matching
// ErrTooLarge, after reading little more than the limit allows.
//
// A zero or negative field means its default, so the zero Limits is DefaultLimits().
// Limits is a plain value, safe to copy and share.
type Limits struct {
	// MaxEntries is the maximum number of archive entries: files, directories,
	// symlinks, hard links and PAX global headers (Scan: files, directories and
	// symlinks). Default 10,000.
	MaxEntries int
	// MaxFileSize is the maximum uncompressed size of one file. Default 512 MiB.
	MaxFileSize int64
	// MaxTotalSize is the maximum uncompressed size of all files together.
	// Default 1 GiB.
	MaxTotalSize int64
	// MaxManifestSize is the maximum size of cairn.yaml. Default 1 MiB.
	MaxManifestSize int64
	// MaxPathLength is the maximum length in bytes of an entry path or a symlink
	// target. Default 1024. A path component is further limited to 255 bytes.
	MaxPathLength int
	// MaxArchiveSize is the maximum number of compressed bytes read from the input.
	// Default MaxTotalSize + 64 MiB.
	MaxArchiveSize int64
	// MaxSteps is the maximum number of steps in the manifest. Default 5,000. Every
	// step of a run is a catalog row, an event or more and a share of the definition
	// a dispatcher parses, so a run's cost grows with it. Unlike the size limits, a
	// manifest over it is an invalid bundle (400), not one too large (413).
	MaxSteps int
}

// DefaultLimits returns the default Limits, every field filled in.
func DefaultLimits() Limits {
	return Limits{}.withDefaults()
}

// withDefaults returns l with every zero or negative field set to its default.
func (l Limits) withDefaults() Limits {
	if l.MaxEntries <= 0 {
		l.MaxEntries = DefaultMaxEntries
	}
	if l.MaxFileSize <= 0 {
		l.MaxFileSize = DefaultMaxFileSize
	}
	if l.MaxTotalSize <= 0 {
		l.MaxTotalSize = DefaultMaxTotalSize
	}
	if l.MaxManifestSize <= 0 {
		l.MaxManifestSize = DefaultMaxManifestSize
	}
	if l.MaxPathLength <= 0 {
		l.MaxPathLength = DefaultMaxPathLength
	}
	if l.MaxArchiveSize <= 0 {
		l.MaxArchiveSize = l.MaxTotalSize + archiveSlack
	}
	if l.MaxSteps <= 0 {
		l.MaxSteps = DefaultMaxSteps
	}
	return l
}

// CheckArchiveSize refuses a compressed archive announced as n bytes (an HTTP
// Content-Length) when n is over MaxArchiveSize, before any of it is read: an error
// matching ErrTooLarge. A negative n (size unknown) passes: Extract stops reading
// such an archive at the limit.
func (l Limits) CheckArchiveSize(n int64) error {
	l = l.withDefaults()
	if n > l.MaxArchiveSize {
		return tooLarge("", "compressed archive is %s, over the %s limit", formatSize(n), formatSize(l.MaxArchiveSize))
	}
	return nil
}

// maxStreamSize bounds the uncompressed tar stream: the files' contents plus, per
// entry, room for its headers (a ustar block, a PAX header with long path and link
// names) and padding, plus the end-of-archive blocks. It catches decompression bombs
// that hide in tar meta headers, which archive/tar consumes without returning them.
func (l Limits) maxStreamSize() int64 {
	perEntry := 3*512 + 2*int64(l.MaxPathLength) + 4*KiB
	return l.MaxTotalSize + int64(l.MaxEntries)*perEntry + trailingSlack
}

// trailingSlack is how many uncompressed bytes may follow the end of the tar archive
// (block padding written by tar tools); anything longer is rejected.
const trailingSlack = 1 * MiB

// formatSize renders a byte count for error messages: "512 MiB", "1 GiB", "1500 bytes".
func formatSize(n int64) string {
	switch {
	case n >= GiB && n%GiB == 0:
		return fmt.Sprintf("%d GiB", n/GiB)
	case n >= MiB && n%MiB == 0:
		return fmt.Sprintf("%d MiB", n/MiB)
	case n >= KiB && n%KiB == 0:
		return fmt.Sprintf("%d KiB", n/KiB)
	default:
		return fmt.Sprintf("%d bytes", n)
	}
}
