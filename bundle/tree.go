package bundle

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
)

// EntryType is the kind of a Tree entry. Directories are not entries: they are implied
// by the paths of the entries below them, and empty directories are not part of a
// bundle.
type EntryType string

const (
	// TypeFile is a regular file.
	TypeFile EntryType = "file"
	// TypeSymlink is a relative symbolic link that resolves, through the bundle's own
	// directories and links, to a file or directory inside the bundle.
	TypeSymlink EntryType = "symlink"
)

// Normalized modes: a file is ModeFile, or ModeExec when any execute bit was set;
// a symlink is ModeSymlink. Other bits (setuid, sticky, group/other write) are dropped.
const (
	ModeFile    fs.FileMode = 0o644
	ModeExec    fs.FileMode = 0o755
	ModeSymlink fs.FileMode = 0o777
)

// Entry is one file or symlink of a bundle.
type Entry struct {
	// Path is slash-separated and relative to the bundle root: "bin/fetch".
	Path string `json:"path"`
	// Type is TypeFile or TypeSymlink.
	Type EntryType `json:"type"`
	// Mode is ModeFile or ModeExec for a file, ModeSymlink for a symlink.
	Mode fs.FileMode `json:"mode"`
	// Size is the content length of a file, the length of a symlink's target.
	Size int64 `json:"size"`
	// SHA256 is the lower-case hex SHA-256 of a file's content or a symlink's target.
	SHA256 string `json:"sha256"`
	// Target is a symlink's target, as written in the link (relative); empty for files.
	Target string `json:"target,omitempty"`
}

// Tree is the content of a bundle: its files and symlinks sorted by Path (byte order).
// A Tree returned by this package is valid (see the package documentation) and must
// not be modified; it is then safe for concurrent use.
type Tree struct {
	Entries []Entry `json:"entries"`
}

// treeEncodingHeader starts the canonical encoding; it versions the format.
const treeEncodingHeader = "cairn-tree-v1\n"

// Digest returns the bundle digest: "sha256:" followed by the lower-case hex SHA-256 of
// the canonical tree encoding (see the package documentation). It does not depend on
// the archive the tree came from: timestamps, owners, entry order, directories and the
// compression are not part of it.
func (t *Tree) Digest() string {
	h := sha256.New()
	// Writing to a hash never fails.
	_ = t.WriteEncoding(h)
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// WriteEncoding writes the canonical tree encoding that Digest hashes: the line
// "cairn-tree-v1", then one line per entry in path order,
// "<type> <mode, 4 octal digits> <size> <sha256 hex> <path>", each ended by "\n".
// It returns the first error of w.
func (t *Tree) WriteEncoding(w io.Writer) error {
	entries := t.Entries
	if !slices.IsSortedFunc(entries, compareEntries) {
		entries = slices.Clone(entries)
		slices.SortFunc(entries, compareEntries)
	}
	bw := bufio.NewWriter(w)
	bw.WriteString(treeEncodingHeader)
	for _, e := range entries {
		fmt.Fprintf(bw, "%s %04o %d %s %s\n", e.Type, e.Mode.Perm(), e.Size, e.SHA256, e.Path)
	}
	return bw.Flush()
}

// Size returns the total size of the tree's files in bytes.
func (t *Tree) Size() int64 {
	var n int64
	for _, e := range t.Entries {
		if e.Type == TypeFile {
			n += e.Size
		}
	}
	return n
}

// Lookup returns the entry with the clean path p, without following symlinks.
func (t *Tree) Lookup(p string) (Entry, bool) {
	i, ok := slices.BinarySearchFunc(t.Entries, p, func(e Entry, p string) int {
		return strings.Compare(e.Path, p)
	})
	if !ok {
		return Entry{}, false
	}
	return t.Entries[i], true
}

// FileMode returns the mode of the regular file at the relative slash path p, following
// symlinks inside the bundle, and false when p does not name a file of the bundle (it is
// missing, a directory, or leaves the bundle). A leading "./" is allowed. *Tree
// implements FileChecker with it.
func (t *Tree) FileMode(p string) (fs.FileMode, bool) {
	if p == "" || strings.HasPrefix(p, "/") || leaves(p) {
		return 0, false
	}
	final, kind, problem := t.follow("", p)
	if problem != "" || kind != kindFile {
		return 0, false
	}
	e, _ := t.Lookup(final)
	return e.Mode, true
}

// compareEntries orders entries by path, in byte order.
func compareEntries(a, b Entry) int { return strings.Compare(a.Path, b.Path) }

// nodeKind is what a path names in a tree.
type nodeKind int

const (
	kindNone nodeKind = iota
	kindFile
	kindSymlink
	kindDir
)

// maxLinkHops bounds symlink resolution (like the kernel's ELOOP limit).
const maxLinkHops = 40

// kind returns what the clean path p names in the tree, without following a symlink
// at p itself; the root ("") is a directory.
func (t *Tree) kind(p string) (Entry, nodeKind) {
	if p == "" {
		return Entry{}, kindDir
	}
	i, ok := slices.BinarySearchFunc(t.Entries, p, func(e Entry, p string) int {
		return strings.Compare(e.Path, p)
	})
	if ok {
		e := t.Entries[i]
		if e.Type == TypeSymlink {
			return e, kindSymlink
		}
		return e, kindFile
	}
	// Paths below p+"/" sort contiguously, from the first one >= p+"/".
	prefix := p + "/"
	j, _ := slices.BinarySearchFunc(t.Entries, prefix, func(e Entry, p string) int {
		return strings.Compare(e.Path, p)
	})
	if j < len(t.Entries) && strings.HasPrefix(t.Entries[j].Path, prefix) {
		return Entry{}, kindDir
	}
	return Entry{}, kindNone
}

// follow resolves the relative path rel from the directory base (clean, "" for the
// root) the way the kernel would inside the extracted bundle, following symlinks at
// every component. It returns the resolved clean path and what it names (kindFile or
// kindDir), or a problem ("leaves the bundle", ...) phrased to follow a symlink target.
func (t *Tree) follow(base, rel string) (string, nodeKind, string) {
	var cur []string
	if base != "" {
		cur = strings.Split(base, "/")
	}
	todo := strings.Split(rel, "/")
	hops := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(cur) == 0 {
				return "", kindNone, "leaves the bundle"
			}
			cur = cur[:len(cur)-1]
			continue
		}
		next := path.Join(path.Join(cur...), c)
		e, kind := t.kind(next)
		switch kind {
		case kindDir:
			cur = append(cur, c)
		case kindFile:
			if len(todo) > 0 {
				return "", kindNone, fmt.Sprintf("uses file %q as a directory", next)
			}
			cur = append(cur, c)
		case kindSymlink:
			hops++
			if hops > maxLinkHops {
				return "", kindNone, "has too many levels of symbolic links"
			}
			if strings.HasPrefix(e.Target, "/") {
				return "", kindNone, fmt.Sprintf("goes through absolute symlink %q", next)
			}
			todo = append(strings.Split(e.Target, "/"), todo...)
		default:
			return "", kindNone, fmt.Sprintf("does not exist in the bundle (%q is missing)", next)
		}
	}
	final := path.Join(cur...)
	_, kind := t.kind(final)
	return final, kind, ""
}

// checkLinks verifies that every symlink of the tree resolves to a file or directory
// inside it.
func (t *Tree) checkLinks() error {
	for _, e := range t.Entries {
		if e.Type != TypeSymlink {
			continue
		}
		if _, _, problem := t.follow(parentDir(e.Path), e.Target); problem != "" {
			return entryError(e.Path, "symlink target %q %s", e.Target, problem)
		}
	}
	return nil
}

// parentDir returns the directory of the clean path p, "" for the root.
func parentDir(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return ""
	}
	return p[:i]
}
