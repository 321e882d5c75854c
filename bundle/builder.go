package bundle

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"slices"
)

// builder accumulates the entries of a bundle while Extract reads an archive or Scan
// walks a folder, enforcing the limits and the rules that need the entries seen so far:
// no duplicates, no file below a file or symlink, no file where a directory is.
type builder struct {
	lim     Limits
	nodes   map[string]nodeKind // every path seen: files, symlinks, directories (implied too)
	dirs    map[string]bool     // directories that had their own entry
	index   map[string]int      // file and symlink paths → position in entries
	entries []Entry
	total   int64 // bytes of file content so far
	count   int   // entries so far, of every kind
}

func newBuilder(lim Limits) *builder {
	return &builder{
		lim:   lim,
		nodes: make(map[string]nodeKind),
		dirs:  make(map[string]bool),
		index: make(map[string]int),
	}
}

// countEntry counts one more entry against MaxEntries.
func (b *builder) countEntry() error {
	b.count++
	if b.count > b.lim.MaxEntries {
		return tooLarge("", "archive has more than %d entries", b.lim.MaxEntries)
	}
	return nil
}

// reserve counts a file of size bytes at p against the size limits, before any of its
// content is read.
func (b *builder) reserve(p string, size int64) error {
	switch {
	case size < 0:
		return entryError(p, "negative size %d", size)
	case p == ManifestPath && size > b.lim.MaxManifestSize:
		return tooLarge(p, "manifest is %s, over the %s limit", formatSize(size), formatSize(b.lim.MaxManifestSize))
	case size > b.lim.MaxFileSize:
		return tooLarge(p, "file is %s, over the %s per-file limit", formatSize(size), formatSize(b.lim.MaxFileSize))
	case size > b.lim.MaxTotalSize-b.total:
		return tooLarge(p, "bundle content exceeds the %s total limit", formatSize(b.lim.MaxTotalSize))
	}
	b.total += size
	return nil
}

// claimDir registers the directory p, which had its own entry.
func (b *builder) claimDir(p string) error {
	switch b.nodes[p] {
	case kindFile, kindSymlink:
		return entryError(p, "directory conflicts with the %s of the same path", b.nodes[p])
	}
	if b.dirs[p] {
		return entryError(p, "duplicate entry")
	}
	if err := b.claimParents(p); err != nil {
		return err
	}
	b.nodes[p] = kindDir
	b.dirs[p] = true
	return nil
}

// claimLeaf registers the file or symlink p.
func (b *builder) claimLeaf(p string, kind nodeKind) error {
	switch b.nodes[p] {
	case kindFile, kindSymlink:
		return entryError(p, "duplicate entry")
	case kindDir:
		return entryError(p, "%s conflicts with the directory of the same path", kind)
	}
	if err := b.claimParents(p); err != nil {
		return err
	}
	b.nodes[p] = kind
	return nil
}

// claimParents registers the ancestors of p as directories. An ancestor that is a file
// or a symlink is refused: nothing is ever written through a symlink, so that even a
// symlink resolving inside the bundle cannot redirect a later write.
func (b *builder) claimParents(p string) error {
	for i := 0; i < len(p); i++ {
		if p[i] != '/' {
			continue
		}
		a := p[:i]
		switch b.nodes[a] {
		case kindFile, kindSymlink:
			return entryError(p, "parent %q is a %s, not a directory", a, b.nodes[a])
		case kindNone:
			b.nodes[a] = kindDir
		}
	}
	return nil
}

// add records a file or symlink entry after its content was written.
func (b *builder) add(e Entry) {
	b.index[e.Path] = len(b.entries)
	b.entries = append(b.entries, e)
}

// file returns the regular file entry already recorded at p.
func (b *builder) file(p string) (Entry, bool) {
	i, ok := b.index[p]
	if !ok || b.entries[i].Type != TypeFile {
		return Entry{}, false
	}
	return b.entries[i], true
}

// tree returns the sorted, checked Tree: cairn.yaml must be a regular file at the root,
// and every symlink must resolve inside the bundle.
func (b *builder) tree() (*Tree, error) {
	entries := slices.Clone(b.entries)
	slices.SortFunc(entries, compareEntries)
	t := &Tree{Entries: entries}
	switch b.nodes[ManifestPath] {
	case kindNone:
		return nil, archiveError("bundle has no %s at its root", ManifestPath)
	case kindDir:
		return nil, entryError(ManifestPath, "manifest must be a regular file, not a directory")
	case kindSymlink:
		return nil, entryError(ManifestPath, "manifest must be a regular file, not a symlink")
	}
	if err := t.checkLinks(); err != nil {
		return nil, err
	}
	return t, nil
}

// String names a kind in error messages.
func (k nodeKind) String() string {
	switch k {
	case kindFile:
		return "file"
	case kindSymlink:
		return "symlink"
	case kindDir:
		return "directory"
	default:
		return "nothing"
	}
}

// symlinkEntry returns the entry of the symlink at p with the given target.
func symlinkEntry(p, target string) Entry {
	sum := sha256.Sum256([]byte(target))
	return Entry{
		Path:   p,
		Type:   TypeSymlink,
		Mode:   ModeSymlink,
		Size:   int64(len(target)),
		SHA256: hex.EncodeToString(sum[:]),
		Target: target,
	}
}

// normalizeMode maps permission bits to ModeExec when any execute bit is set and to
// ModeFile otherwise.
func normalizeMode(perm fs.FileMode) fs.FileMode {
	if perm&0o111 != 0 {
		return ModeExec
	}
	return ModeFile
}
