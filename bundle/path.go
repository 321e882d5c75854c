package bundle

import (
	"path"
	"strings"
	"unicode/utf8"
)

// maxComponentLength is the longest path component accepted (NAME_MAX on Linux).
const maxComponentLength = 255

// cleanEntryPath validates the name of an archive entry or of a file found by Scan and
// returns it in canonical form: relative, slash-separated, without a leading "./" or a
// trailing "/". It returns "" for the bundle root itself ("." or "./").
//
// The name must be canonical apart from the leading "./" and trailing "/": "a//b",
// "a/./b" and "a/../b" are rejected rather than cleaned, so two different names can
// never denote the same file.
func cleanEntryPath(name string, lim Limits) (string, error) {
	if name == "" {
		return "", entryError(name, "empty path")
	}
	if len(name) > lim.MaxPathLength {
		return "", entryError(truncate(name), "path is %d bytes long, over the %d-byte limit", len(name), lim.MaxPathLength)
	}
	if err := checkPathChars(name); err != "" {
		return "", entryError(name, "path %s", err)
	}
	if strings.HasPrefix(name, "/") {
		return "", entryError(name, "path is absolute")
	}
	p := name
	for strings.HasPrefix(p, "./") {
		p = p[2:]
	}
	p = strings.TrimSuffix(p, "/")
	if p == "" || p == "." {
		return "", nil
	}
	for _, c := range strings.Split(p, "/") {
		switch {
		case c == "..":
			if leaves(p) {
				return "", entryError(name, "path leaves the bundle")
			}
			return "", entryError(name, `path contains a ".." component`)
		case c == "" || c == ".":
			return "", entryError(name, "path is not canonical (empty or \".\" component)")
		case len(c) > maxComponentLength:
			return "", entryError(name, "path component is %d bytes long, over the %d-byte limit", len(c), maxComponentLength)
		}
	}
	return p, nil
}

// checkLinkTarget validates the target of the symlink at the clean path p without
// looking at other entries: relative, and staying inside the bundle when resolved
// lexically. Tree.resolve later follows it through the other symlinks.
func checkLinkTarget(p, target string, lim Limits) error {
	switch {
	case target == "":
		return entryError(p, "symlink has an empty target")
	case len(target) > lim.MaxPathLength:
		return entryError(p, "symlink target is %d bytes long, over the %d-byte limit", len(target), lim.MaxPathLength)
	case strings.HasPrefix(target, "/"):
		return entryError(p, "symlink target %q is absolute", target)
	}
	if err := checkPathChars(target); err != "" {
		return entryError(p, "symlink target %q %s", target, err)
	}
	if leaves(path.Join(path.Dir(p), target)) {
		return entryError(p, "symlink target %q leaves the bundle", target)
	}
	return nil
}

// checkPathChars returns why name is not an acceptable path or symlink target, or "".
// Control characters and invalid UTF-8 are refused so that paths print safely in
// errors and logs and encode unambiguously in the canonical encoding (one entry per
// line); backslashes are refused because they are separators on Windows.
func checkPathChars(name string) string {
	if !utf8.ValidString(name) {
		return "is not valid UTF-8"
	}
	for _, r := range name {
		switch {
		case r < 0x20 || r == 0x7f:
			return "contains a control character"
		case r == '\\':
			return "contains a backslash"
		}
	}
	return ""
}

// leaves reports whether the slash path p, resolved lexically from the bundle root,
// goes above it.
func leaves(p string) bool {
	c := path.Clean(p)
	return c == ".." || strings.HasPrefix(c, "../") || strings.HasPrefix(c, "/")
}

// truncate shortens an over-long name for an error message.
func truncate(s string) string {
	const keep = 64
	if len(s) <= keep {
		return s
	}
	cut := keep
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
