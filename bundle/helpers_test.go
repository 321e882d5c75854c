package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// minimalManifest is a valid cairn.yaml needing no files.
const minimalManifest = "name: demo\nsteps:\n  - key: a\n    builtin: noop\n"

// tarEntry is one entry of a test archive.
type tarEntry struct {
	hdr  tar.Header
	body string
}

func fileEntry(name, body string, mode int64) tarEntry {
	return tarEntry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(body))}, body: body}
}

func dirEntry(name string) tarEntry {
	return tarEntry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755}}
}

func linkEntry(name, target string) tarEntry {
	return tarEntry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777}}
}

func hardlinkEntry(name, target string) tarEntry {
	return tarEntry{hdr: tar.Header{Typeflag: tar.TypeLink, Name: name, Linkname: target}}
}

func manifestEntry() tarEntry { return fileEntry("cairn.yaml", minimalManifest, 0o644) }

// makeTar returns the uncompressed tar of entries, written as given (no checks).
func makeTar(t testing.TB, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := e.hdr
		if hdr.ModTime.IsZero() && hdr.Typeflag != tar.TypeXGlobalHeader {
			hdr.ModTime = time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
		}
		require.NoError(t, tw.WriteHeader(&hdr))
		if e.body != "" {
			_, err := tw.Write([]byte(e.body))
			require.NoError(t, err)
		}
	}
	require.NoError(t, tw.Close())
	return buf.Bytes()
}

// gz compresses b.
func gz(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, err := zw.Write(b)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

// makeArchive returns the gzip-compressed tar of entries.
func makeArchive(t testing.TB, entries ...tarEntry) []byte {
	t.Helper()
	return gz(t, makeTar(t, entries...))
}

// writeFiles creates files under dir: path → content; a path ending in "*" is made
// executable (the star is dropped).
func writeFiles(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		mode := os.FileMode(0o644)
		if p[len(p)-1] == '*' {
			p, mode = p[:len(p)-1], 0o755
		}
		full := filepath.Join(dir, filepath.FromSlash(p))
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte(content), mode))
		require.NoError(t, os.Chmod(full, mode))
	}
}

// listFiles returns every path under dir (slash-separated, relative), with "/" after
// directories and " -> target" after symlinks.
func listFiles(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch {
		case d.IsDir():
			rel += "/"
		case d.Type()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			rel += " -> " + target
		}
		out = append(out, rel)
		return nil
	})
	require.NoError(t, err)
	return out
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// errorFields lists the Field of every *ValidationError in err (the path into the
// document a tool would point at).
func errorFields(err error) []string {
	var fields []string
	for _, ve := range ValidationErrors(err) {
		fields = append(fields, ve.Field)
	}
	return fields
}

// validateError parses yaml, which must parse, and returns what Validate (no files)
// refuses it for, which must be something.
func validateError(t *testing.T, yaml string) error {
	t.Helper()
	m, err := ParseManifest([]byte(yaml))
	require.NoError(t, err)
	err = m.Validate(nil)
	require.Error(t, err)
	return err
}
