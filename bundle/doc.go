// Package bundle implements Cairn's bundle format (docs/functions.md): packing a
// folder into a deterministic archive, reading an uploaded archive as a stream and
// validating it against hostile input, the canonical digest of a bundle, and the
// manifest (cairn.yaml): its schema, validation and normalization into a
// Definition.
//
// It imports nothing of Cairn's. Every function is safe for concurrent use; values
// returned (Tree, Manifest, Definition, Bundle) must not be modified once shared.
//
// # Archive
//
// A bundle is a gzip-compressed tar archive with cairn.yaml at its root and the
// functions' code beside it. Extract reads one from an io.Reader as a stream, in memory
// bounded by a few buffers, checks every entry before writing it into a directory the
// caller owns, and returns the bundle's Tree. Scan builds the Tree of a folder under the
// same rules. The rules, for both:
//
//   - paths are relative, canonical ("a/b"; a leading "./" and a directory's trailing
//     "/" are accepted), valid UTF-8 without control characters or backslashes, at
//     most Limits.MaxPathLength bytes, components at most 255; no "..", no duplicates,
//     nothing below a file or a symlink;
//   - entries are regular files, directories, symlinks and (archives only) hard links;
//     devices, FIFOs, sockets, sparse files and other types are refused;
//   - a symlink is relative and resolves, through the bundle's own directories and
//     symlinks, to an existing file or directory inside the bundle (at most 40 hops);
//   - a hard link must name an earlier regular file; it is extracted as a copy;
//   - file modes are normalized to 0644, or 0755 when any execute bit is set;
//     owners, times and other bits are dropped; empty directories are dropped;
//   - cairn.yaml is a regular file at the root;
//   - Limits (entries, per-file, total, manifest and compressed sizes) are enforced
//     before content is read, from the sizes the tar headers declare, and the whole
//     uncompressed stream is bounded too, so a decompression bomb stops at the limit.
//
// Violations are *ValidationError values matching ErrInvalid (and ErrTooLarge for a
// limit), each naming the entry: `entry "../etc/passwd": path leaves the bundle`.
//
// # Digest and canonical encoding
//
// A bundle's digest is "sha256:" + the hex SHA-256 of the canonical encoding of its
// Tree, not of any archive's bytes:
//
//	cairn-tree-v1\n
//	<type> <mode> <size> <sha256> <path>\n    (one line per entry, sorted by path)
//
// where type is "file" or "symlink", mode is four octal digits (0644, 0755, or 0777
// for a symlink), size is decimal (a file's length, a symlink target's length), sha256
// is the lower-case hex SHA-256 of the file's content or of the symlink's target, and
// path is the entry's path; paths are sorted in byte order and cannot contain a
// newline. Directories are not encoded. The same tree thus has the same digest,
// whatever the archive's entry order, timestamps, owners, directory entries, tar
// format or compression.
//
// WriteCanonical writes the canonical archive of a tree, the object Cairn stores at
// bundles/sha256/<hex>: files and symlinks in path order, no directory entries, uid and
// gid 0, empty owner names, mtime 1970-01-01T00:00:00Z, PAX format, gzip at
// CanonicalGzipLevel with an empty header. Its bytes are stable for a given Go
// version; should a future Go compress differently, the digest does not change.
// Pack writes the canonical archive of a folder (`cairn deploy DIR`).
//
// # Manifest
//
// ParseManifest decodes cairn.yaml strictly (unknown fields are errors), Validate
// checks it, optionally against the bundle's files (exec programs must exist and be
// executable), reporting every problem as a *ValidationError naming the step and
// field (`cairn.yaml: steps[1].needs: step "b" needs unknown step "z"`), joined.
// Normalize returns the Definition: defaults applied (timeout: the step's, the
// defaults', else 5m; retry field by field: the step's, the defaults', else
// max_attempts 1, fixed, delay 1s, max_delay max(delay, 1h), jitter 0), needs sorted,
// steps in topological order then by key. Its canonical JSON and Fingerprint identify
// a workflow version's behaviour independently of how the manifest was written.
//
// Load does it all for an upload: Extract, then parse, validate and normalize. LoadDir
// does the same for a folder.
package bundle
