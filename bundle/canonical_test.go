package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// execManifest uses an exec step, so the tree matters to validation.
const execManifest = `name: demo
steps:
  - key: fetch
    exec: ["./bin/fetch", "--fast"]
  - key: after
    needs: [fetch]
    builtin: echo
`

// demoFiles is a bundle folder; "*" marks executables (see writeFiles).
var demoFiles = map[string]string{
	"cairn.yaml":       execManifest,
	"bin/fetch*":       "#!/bin/sh\necho fetched\n",
	"lib/a.txt":        "alpha",
	"lib/deep/b.txt":   "beta",
	"README.md":        "# demo\n",
	"a-b":              "dash sorts before slash",
	"a/z":              "slash",
	".git/HEAD":        "ref: refs/heads/main\n",
	".cairn/db/x":      "dev data",
	"sub/.git":         "gitdir: ../.git/modules/sub\n",
	"sub/.cairn/state": "nested dev data",
}

func packDir(t *testing.T, dir string) ([]byte, string) {
	t.Helper()
	var buf bytes.Buffer
	digest, err := Pack(context.Background(), dir, &buf)
	require.NoError(t, err)
	return buf.Bytes(), digest
}

func newDemoDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	writeFiles(t, dir, demoFiles)
	require.NoError(t, os.Symlink("bin/fetch", filepath.Join(dir, "fetch-link")))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "empty"), 0o755))
	return dir
}

func TestPackDeterministic(t *testing.T) {
	t.Parallel()
	dir := newDemoDir(t)
	first, digest := packDir(t, dir)
	require.Regexp(t, `^sha256:[0-9a-f]{64}$`, digest)

	again, digest2 := packDir(t, dir)
	require.Equal(t, digest, digest2)
	require.Equal(t, first, again, "same tree, same bytes")

	// Touching every file changes nothing.
	old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	require.NoError(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.Type()&os.ModeSymlink != 0 {
			return err
		}
		return os.Chtimes(p, old, old)
	}))
	touched, digest3 := packDir(t, dir)
	require.Equal(t, digest, digest3)
	require.Equal(t, first, touched)

	// Same content in another folder, written in another order and with other
	// non-executable modes: same digest.
	other := t.TempDir()
	for p, content := range demoFiles {
		if strings.HasPrefix(p, ".") || strings.Contains(p, "/.") {
			continue // skipped by Pack anyway
		}
		writeFiles(t, other, map[string]string{p: content})
	}
	require.NoError(t, os.Chmod(filepath.Join(other, "README.md"), 0o600))
	require.NoError(t, os.Chmod(filepath.Join(other, "bin", "fetch"), 0o700))
	require.NoError(t, os.Symlink("bin/fetch", filepath.Join(other, "fetch-link")))
	_, digest4 := packDir(t, other)
	require.Equal(t, digest, digest4)
}

// TestPackLeavesOutTests: the cases of `cairn test` in tests/ at the root are
// not part of the bundle, so editing one does not change the digest (a deploy
// makes no new version); a folder named tests deeper down is the bundle's.
func TestPackLeavesOutTests(t *testing.T) {
	t.Parallel()
	dir := newDemoDir(t)
	_, digest := packDir(t, dir)

	writeFiles(t, dir, map[string]string{"tests/greet.yaml": "name: greets\n"})
	_, withTests := packDir(t, dir)
	require.Equal(t, digest, withTests, "tests/ is left out")
	writeFiles(t, dir, map[string]string{"tests/greet.yaml": "name: greets by name\n"})
	_, edited := packDir(t, dir)
	require.Equal(t, digest, edited, "editing a test makes no new version")
	tree, err := Scan(context.Background(), dir, Limits{})
	require.NoError(t, err)
	for _, e := range tree.Entries {
		require.False(t, strings.HasPrefix(e.Path, "tests"), e.Path)
	}

	writeFiles(t, dir, map[string]string{"lib/tests/data.txt": "read by a handler"})
	_, nested := packDir(t, dir)
	require.NotEqual(t, digest, nested, "lib/tests is part of the bundle")
}

func TestDigestChanges(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		change func(t *testing.T, dir string)
	}{
		{"one byte", func(t *testing.T, dir string) {
			writeFiles(t, dir, map[string]string{"lib/a.txt": "alphA"})
		}},
		{"execute bit", func(t *testing.T, dir string) {
			require.NoError(t, os.Chmod(filepath.Join(dir, "lib", "a.txt"), 0o744))
		}},
		{"rename", func(t *testing.T, dir string) {
			require.NoError(t, os.Rename(filepath.Join(dir, "README.md"), filepath.Join(dir, "README")))
		}},
		{"new empty file", func(t *testing.T, dir string) {
			writeFiles(t, dir, map[string]string{"new": ""})
		}},
		{"symlink target", func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(filepath.Join(dir, "fetch-link")))
			require.NoError(t, os.Symlink("./bin/fetch", filepath.Join(dir, "fetch-link")))
		}},
		{"symlink replaced by its file", func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(filepath.Join(dir, "fetch-link")))
			writeFiles(t, dir, map[string]string{"fetch-link*": "#!/bin/sh\necho fetched\n"})
		}},
	}
	base := newDemoDir(t)
	_, baseDigest := packDir(t, base)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := newDemoDir(t)
			tt.change(t, dir)
			_, digest := packDir(t, dir)
			require.NotEqual(t, baseDigest, digest)
		})
	}
}

// TestDigestIgnoresArchiveForm extracts archives of the same tree written in many
// forms and checks they all have the digest of the packed folder.
func TestDigestIgnoresArchiveForm(t *testing.T) {
	t.Parallel()
	dir := newDemoDir(t)
	canonical, want := packDir(t, dir)

	files := []tarEntry{
		fileEntry("cairn.yaml", execManifest, 0o644),
		fileEntry("bin/fetch", "#!/bin/sh\necho fetched\n", 0o755),
		fileEntry("lib/a.txt", "alpha", 0o644),
		fileEntry("lib/deep/b.txt", "beta", 0o644),
		fileEntry("README.md", "# demo\n", 0o644),
		fileEntry("a-b", "dash sorts before slash", 0o644),
		fileEntry("a/z", "slash", 0o644),
		linkEntry("fetch-link", "bin/fetch"),
	}
	reversed := make([]tarEntry, len(files))
	for i, e := range files {
		reversed[len(files)-1-i] = e
	}
	var dressed []tarEntry // owners, times, "./" prefixes, directory entries, odd modes
	dressed = append(dressed, dirEntry("./"), dirEntry("./lib/"), dirEntry("./empty/"))
	for i, e := range files {
		e.hdr.Name = "./" + e.hdr.Name
		e.hdr.Uid, e.hdr.Gid, e.hdr.Uname, e.hdr.Gname = 1000+i, 100, "ada", "staff"
		e.hdr.ModTime = time.Unix(int64(1e9+i*7919), 123)
		if e.hdr.Mode == 0o644 {
			e.hdr.Mode = 0o664
		}
		dressed = append(dressed, e)
	}
	withFormat := func(f tar.Format) []tarEntry {
		out := make([]tarEntry, len(files))
		for i, e := range files {
			e.hdr.Format = f
			out[i] = e
		}
		return out
	}
	tests := []struct {
		name    string
		archive []byte
	}{
		{"canonical", canonical},
		{"plain", makeArchive(t, files...)},
		{"reversed", makeArchive(t, reversed...)},
		{"dressed up", makeArchive(t, dressed...)},
		{"GNU format", makeArchive(t, withFormat(tar.FormatGNU)...)},
		{"PAX format", makeArchive(t, withFormat(tar.FormatPAX)...)},
		{"best compression", gzLevel(t, makeTar(t, files...), gzip.BestCompression)},
		{"no compression", gzLevel(t, makeTar(t, files...), gzip.NoCompression)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := Load(context.Background(), bytes.NewReader(tt.archive), filepath.Join(t.TempDir(), "x"), Limits{})
			require.NoError(t, err)
			require.Equal(t, want, b.Digest)
		})
	}
}

func gzLevel(t *testing.T, b []byte, level int) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, level)
	require.NoError(t, err)
	_, err = zw.Write(b)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

func TestCanonicalArchive(t *testing.T) {
	t.Parallel()
	dir := newDemoDir(t)
	archive, digest := packDir(t, dir)

	zr, err := gzip.NewReader(bytes.NewReader(archive))
	require.NoError(t, err)
	require.Empty(t, zr.Name)
	require.True(t, zr.ModTime.IsZero())
	require.Empty(t, zr.Comment)
	tr := tar.NewReader(zr)
	var names []string
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		names = append(names, hdr.Name)
		require.Zero(t, hdr.Uid)
		require.Zero(t, hdr.Gid)
		require.Empty(t, hdr.Uname)
		require.Empty(t, hdr.Gname)
		require.Equal(t, int64(0), hdr.ModTime.Unix())
		require.Contains(t, []byte{tar.TypeReg, tar.TypeSymlink}, hdr.Typeflag)
		require.Contains(t, []int64{0o644, 0o755, 0o777}, hdr.Mode)
	}
	require.Equal(t, []string{"README.md", "a-b", "a/z", "bin/fetch", "cairn.yaml", "fetch-link", "lib/a.txt", "lib/deep/b.txt"}, names,
		"sorted by path bytes, no directories, .git and .cairn skipped")

	// Round trip: extracting the canonical archive and writing it again gives the same
	// bytes.
	out := filepath.Join(t.TempDir(), "x")
	tree, err := Extract(context.Background(), bytes.NewReader(archive), out, Limits{})
	require.NoError(t, err)
	require.Equal(t, digest, tree.Digest())
	var again bytes.Buffer
	require.NoError(t, WriteCanonical(context.Background(), out, tree, &again))
	require.Equal(t, archive, again.Bytes())
}

func TestTreeEncodingGolden(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"cairn.yaml": minimalManifest, "bin/run*": "run\n"})
	require.NoError(t, os.Symlink("bin/run", filepath.Join(dir, "run")))
	tree, err := Scan(context.Background(), dir, Limits{})
	require.NoError(t, err)
	var enc strings.Builder
	require.NoError(t, tree.WriteEncoding(&enc))
	require.Equal(t, "cairn-tree-v1\n"+
		"file 0755 4 "+sha256Hex("run\n")+" bin/run\n"+
		"file 0644 47 "+sha256Hex(minimalManifest)+" cairn.yaml\n"+
		"symlink 0777 7 "+sha256Hex("bin/run")+" run\n", enc.String())
	// Pinned: a change here changes every bundle's digest.
	require.Equal(t, "sha256:"+sha256Hex(enc.String()), tree.Digest())
	require.Equal(t, "sha256:d9ed85cc5012e5a8795066e938416f21d55ffa7c7fc4c86aa4c35bf91e31567c", tree.Digest())
}

func TestPackRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  string
	}{
		{"symlink leaving", func(t *testing.T, dir string) {
			require.NoError(t, os.Symlink("../../etc/passwd", filepath.Join(dir, "passwd")))
		}, `entry "passwd": symlink target "../../etc/passwd" leaves the bundle`},
		{"absolute symlink", func(t *testing.T, dir string) {
			require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(dir, "passwd")))
		}, `entry "passwd": symlink target "/etc/passwd" is absolute`},
		{"socket", func(t *testing.T, dir string) {
			l, err := net.Listen("unix", filepath.Join(dir, "s"))
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
		}, `entry "s": sockets are not allowed in a bundle`},
		{"no manifest", func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(filepath.Join(dir, "cairn.yaml")))
		}, `bundle has no cairn.yaml at its root`},
		{"exec program not executable", func(t *testing.T, dir string) {
			require.NoError(t, os.Chmod(filepath.Join(dir, "bin", "fetch"), 0o644))
		}, `cairn.yaml: step "fetch": exec: program "./bin/fetch" is not executable (mode 0644): set its execute bit`},
		{"exec program missing", func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(filepath.Join(dir, "bin", "fetch")))
			require.NoError(t, os.Remove(filepath.Join(dir, "fetch-link")))
		}, `cairn.yaml: step "fetch": exec: program "./bin/fetch" is not a file of the bundle`},
		{"file too large", func(t *testing.T, dir string) {
			f, err := os.Create(filepath.Join(dir, "huge"))
			require.NoError(t, err)
			require.NoError(t, f.Truncate(DefaultMaxFileSize+1)) // sparse: nothing is written
			require.NoError(t, f.Close())
		}, `entry "huge": file is 536870913 bytes, over the 512 MiB per-file limit`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := newDemoDir(t)
			tt.setup(t, dir)
			var buf bytes.Buffer
			_, err := Pack(context.Background(), dir, &buf)
			require.ErrorIs(t, err, ErrInvalid)
			require.ErrorContains(t, err, tt.want)
			require.Zero(t, buf.Len(), "nothing written for an invalid bundle")
		})
	}
}

func TestWriteCanonicalDetectsChanges(t *testing.T) {
	t.Parallel()
	dir := newDemoDir(t)
	tree, err := Scan(context.Background(), dir, Limits{})
	require.NoError(t, err)
	writeFiles(t, dir, map[string]string{"lib/a.txt": "ALPHA"})
	err = WriteCanonical(context.Background(), dir, tree, io.Discard)
	require.ErrorContains(t, err, `entry "lib/a.txt": file changed since the bundle was read`)
	writeFiles(t, dir, map[string]string{"lib/a.txt": "alpha, longer"})
	err = WriteCanonical(context.Background(), dir, tree, io.Discard)
	require.ErrorContains(t, err, `entry "lib/a.txt": file changed since the bundle was read`)
}
