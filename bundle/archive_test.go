package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestExtract(t *testing.T) {
	t.Parallel()
	archive := makeArchive(t,
		tarEntry{hdr: tar.Header{Typeflag: tar.TypeXGlobalHeader, Name: "pax_global_header", PAXRecords: map[string]string{"comment": "abc123"}}},
		dirEntry("./"),
		tarEntry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "./cairn.yaml", Mode: 0o600, Size: int64(len(minimalManifest)), Uid: 1000, Uname: "ada"}, body: minimalManifest},
		dirEntry("bin/"),
		fileEntry("bin/run", "#!/bin/sh\necho hi\n", 0o4775),
		fileEntry("lib/data.txt", "data", 0o666),
		dirEntry("empty/"),
		linkEntry("latest", "bin/run"),
		linkEntry("lib/up", ".."),
		hardlinkEntry("copy.txt", "lib/data.txt"),
	)
	dir := filepath.Join(t.TempDir(), "x")
	tree, err := Extract(context.Background(), bytes.NewReader(archive), dir, Limits{})
	require.NoError(t, err)

	require.Equal(t, []Entry{
		{Path: "bin/run", Type: TypeFile, Mode: ModeExec, Size: 18, SHA256: sha256Hex("#!/bin/sh\necho hi\n")},
		{Path: "cairn.yaml", Type: TypeFile, Mode: ModeFile, Size: int64(len(minimalManifest)), SHA256: sha256Hex(minimalManifest)},
		{Path: "copy.txt", Type: TypeFile, Mode: ModeFile, Size: 4, SHA256: sha256Hex("data")},
		{Path: "latest", Type: TypeSymlink, Mode: ModeSymlink, Size: 7, SHA256: sha256Hex("bin/run"), Target: "bin/run"},
		{Path: "lib/data.txt", Type: TypeFile, Mode: ModeFile, Size: 4, SHA256: sha256Hex("data")},
		{Path: "lib/up", Type: TypeSymlink, Mode: ModeSymlink, Size: 2, SHA256: sha256Hex(".."), Target: ".."},
	}, tree.Entries)
	require.Equal(t, []string{
		"bin/", "bin/run", "cairn.yaml", "copy.txt", "latest -> bin/run", "lib/", "lib/data.txt", "lib/up -> ..",
	}, listFiles(t, dir), "the empty directory is dropped, the hard link is a copy")

	for p, want := range map[string]os.FileMode{"bin/run": 0o755, "cairn.yaml": 0o644, "copy.txt": 0o644, "lib/data.txt": 0o644} {
		info, err := os.Lstat(filepath.Join(dir, p))
		require.NoError(t, err)
		require.Equal(t, want, info.Mode(), p)
	}
	mode, ok := tree.FileMode("./latest")
	require.True(t, ok)
	require.Equal(t, ModeExec, mode)
	mode, ok = tree.FileMode("lib/up/lib/up/bin/run")
	require.True(t, ok)
	require.Equal(t, ModeExec, mode)
	_, ok = tree.FileMode("lib")
	require.False(t, ok, "a directory is not a file")
	require.Equal(t, int64(18+len(minimalManifest)+4+4), tree.Size())
}

func TestExtractRejects(t *testing.T) {
	t.Parallel()
	small := Limits{MaxEntries: 4, MaxFileSize: 100, MaxTotalSize: 150, MaxManifestSize: 80, MaxPathLength: 40}
	tests := []struct {
		name     string
		archive  []byte // or entries, with a manifest added first
		entries  []tarEntry
		lim      Limits
		want     string
		tooLarge bool
	}{
		{name: "absolute path", entries: []tarEntry{fileEntry("/etc/passwd", "x", 0o644)},
			want: `entry "/etc/passwd": path is absolute`},
		{name: "dot-dot leaving", entries: []tarEntry{fileEntry("../etc/passwd", "x", 0o644)},
			want: `entry "../etc/passwd": path leaves the bundle`},
		{name: "dot-dot leaving deeper", entries: []tarEntry{fileEntry("a/../../x", "x", 0o644)},
			want: `entry "a/../../x": path leaves the bundle`},
		{name: "dot-dot inside", entries: []tarEntry{fileEntry("a/../b", "x", 0o644)},
			want: `entry "a/../b": path contains a ".." component`},
		{name: "dot-dot directory", entries: []tarEntry{dirEntry("../")},
			want: `entry "../": path leaves the bundle`},
		{name: "not canonical", entries: []tarEntry{fileEntry("a//b", "x", 0o644)},
			want: `entry "a//b": path is not canonical`},
		{name: "backslash", entries: []tarEntry{fileEntry(`a\..\b`, "x", 0o644)},
			want: `entry "a\\..\\b": path contains a backslash`},
		{name: "control character", entries: []tarEntry{fileEntry("a\nb", "x", 0o644)},
			want: `entry "a\nb": path contains a control character`},
		{name: "invalid UTF-8", entries: []tarEntry{fileEntry("a\xffb", "x", 0o644)},
			want: `path is not valid UTF-8`},
		{name: "path too long", entries: []tarEntry{fileEntry(strings.Repeat("a", 50), "x", 0o644)}, lim: small,
			want: `path is 50 bytes long, over the 40-byte limit`},
		{name: "component too long", entries: []tarEntry{fileEntry(strings.Repeat("a", 256), "x", 0o644)},
			want: `path component is 256 bytes long, over the 255-byte limit`},
		{name: "symlink absolute", entries: []tarEntry{linkEntry("etc", "/etc")},
			want: `entry "etc": symlink target "/etc" is absolute`},
		{name: "symlink leaving", entries: []tarEntry{linkEntry("sub/up", "../../x")},
			want: `entry "sub/up": symlink target "../../x" leaves the bundle`},
		{name: "symlink leaving through another symlink", entries: []tarEntry{
			linkEntry("a", "."), fileEntry("d/f", "x", 0o644), linkEntry("d/y", "../a/..")},
			want: `entry "d/y": symlink target "../a/.." leaves the bundle`},
		{name: "symlink dangling", entries: []tarEntry{linkEntry("l", "missing.txt")},
			want: `entry "l": symlink target "missing.txt" does not exist in the bundle ("missing.txt" is missing)`},
		{name: "symlink loop", entries: []tarEntry{linkEntry("l1", "l2"), linkEntry("l2", "l1")},
			want: `entry "l1": symlink target "l2" has too many levels of symbolic links`},
		{name: "symlink through a file", entries: []tarEntry{fileEntry("f", "x", 0o644), linkEntry("l", "f/x")},
			want: `entry "l": symlink target "f/x" uses file "f" as a directory`},
		{name: "write through a symlink", entries: []tarEntry{fileEntry("dir/f", "x", 0o644), linkEntry("lnk", "dir"), fileEntry("lnk/evil", "x", 0o644)},
			want: `entry "lnk/evil": parent "lnk" is a symlink, not a directory`},
		{name: "symlink on a directory", entries: []tarEntry{fileEntry("dir/f", "x", 0o644), linkEntry("dir", ".")},
			want: `entry "dir": symlink conflicts with the directory of the same path`},
		{name: "file below a file", entries: []tarEntry{fileEntry("a", "x", 0o644), fileEntry("a/b", "x", 0o644)},
			want: `entry "a/b": parent "a" is a file, not a directory`},
		{name: "directory over a file", entries: []tarEntry{fileEntry("a", "x", 0o644), dirEntry("a/")},
			want: `entry "a": directory conflicts with the file of the same path`},
		{name: "duplicate", entries: []tarEntry{fileEntry("a", "x", 0o644), fileEntry("./a", "y", 0o644)},
			want: `entry "a": duplicate entry`},
		{name: "duplicate manifest", entries: []tarEntry{manifestEntry()},
			want: `cairn.yaml: duplicate entry`},
		{name: "duplicate directory", entries: []tarEntry{dirEntry("d/"), dirEntry("./d")},
			want: `entry "d": duplicate entry`},
		{name: "hard link to nothing", entries: []tarEntry{hardlinkEntry("h", "missing")},
			want: `entry "h": hard link target "missing" is not an earlier regular file of the bundle`},
		{name: "hard link to a later file", entries: []tarEntry{hardlinkEntry("h", "later"), fileEntry("later", "x", 0o644)},
			want: `entry "h": hard link target "later" is not an earlier regular file of the bundle`},
		{name: "hard link outside", entries: []tarEntry{hardlinkEntry("h", "/etc/passwd")},
			want: `entry "h": hard link target "/etc/passwd": path is absolute`},
		{name: "hard link to a symlink", entries: []tarEntry{fileEntry("f", "x", 0o644), linkEntry("l", "f"), hardlinkEntry("h", "l")},
			want: `entry "h": hard link target "l" is not an earlier regular file of the bundle`},
		{name: "character device", entries: []tarEntry{{hdr: tar.Header{Typeflag: tar.TypeChar, Name: "null", Devmajor: 1, Devminor: 3}}},
			want: `entry "null": character device entries are not allowed`},
		{name: "block device", entries: []tarEntry{{hdr: tar.Header{Typeflag: tar.TypeBlock, Name: "sda", Devmajor: 8}}},
			want: `entry "sda": block device entries are not allowed`},
		{name: "fifo", entries: []tarEntry{{hdr: tar.Header{Typeflag: tar.TypeFifo, Name: "pipe"}}},
			want: `entry "pipe": FIFO entries are not allowed`},
		{name: "contiguous file", entries: []tarEntry{{hdr: tar.Header{Typeflag: tar.TypeCont, Name: "c"}}},
			want: `entry "c": contiguous file entries are not allowed`},
		{name: "file named like the root", entries: []tarEntry{fileEntry(".", "", 0o644)},
			want: `entry ".": regular file has a directory name`},
		{name: "too many entries", entries: []tarEntry{dirEntry("a/"), dirEntry("b/"), dirEntry("c/"), dirEntry("d/")}, lim: small,
			want: `archive has more than 4 entries`, tooLarge: true},
		{name: "file too large", entries: []tarEntry{fileEntry("big", strings.Repeat("x", 101), 0o644)}, lim: small,
			want: `entry "big": file is 101 bytes, over the 100 bytes per-file limit`, tooLarge: true},
		{name: "total too large", entries: []tarEntry{fileEntry("a", strings.Repeat("x", 60), 0o644), fileEntry("b", strings.Repeat("x", 60), 0o644)}, lim: small,
			want: `entry "b": bundle content exceeds the 150 bytes total limit`, tooLarge: true},
		{name: "hard link copy too large", entries: []tarEntry{fileEntry("a", strings.Repeat("x", 60), 0o644), hardlinkEntry("b", "a")}, lim: small,
			want: `entry "b": bundle content exceeds the 150 bytes total limit`, tooLarge: true},
		{name: "manifest too large", archive: makeArchive(t, fileEntry("cairn.yaml", strings.Repeat("#", 81), 0o644)), lim: small,
			want: `cairn.yaml: manifest is 81 bytes, over the 80 bytes limit`, tooLarge: true},
		{name: "compressed archive too large", archive: makeArchive(t, manifestEntry(), fileEntry("r", randomText(4096), 0o644)),
			lim: Limits{MaxArchiveSize: 1000}, want: `compressed archive is larger than the 1000 bytes limit`, tooLarge: true},
		{name: "missing manifest", archive: makeArchive(t, fileEntry("main.go", "package main", 0o644)),
			want: `bundle has no cairn.yaml at its root`},
		{name: "manifest in a subdirectory", archive: makeArchive(t, fileEntry("sub/cairn.yaml", minimalManifest, 0o644)),
			want: `bundle has no cairn.yaml at its root`},
		{name: "manifest is a symlink", archive: makeArchive(t, fileEntry("real.yaml", minimalManifest, 0o644), linkEntry("cairn.yaml", "real.yaml")),
			want: `cairn.yaml: manifest must be a regular file, not a symlink`},
		{name: "manifest is a directory", archive: makeArchive(t, fileEntry("cairn.yaml/x", minimalManifest, 0o644)),
			want: `cairn.yaml: manifest must be a regular file, not a directory`},
		{name: "empty input", archive: []byte{},
			want: `archive is empty`},
		{name: "not gzip", archive: makeTar(t, manifestEntry()),
			want: `archive is not gzip-compressed`},
		{name: "not tar", archive: gz(t, []byte(strings.Repeat("hello, world\n", 100))),
			want: `archive is not a tar archive`},
		{name: "empty tar", archive: gz(t, make([]byte, 1024)),
			want: `bundle has no cairn.yaml at its root`},
		{name: "truncated", archive: truncate_(makeArchive(t, manifestEntry(), fileEntry("r", randomText(2000), 0o644)), 600),
			want: `archive is truncated`},
		{name: "trailing garbage", archive: append(makeArchive(t, manifestEntry()), "this is garbage, not a gzip member"...),
			want: `archive is corrupt: invalid gzip header`},
		{name: "corrupt checksum", archive: flipByte(makeArchive(t, manifestEntry()), -6),
			want: `archive is corrupt: gzip checksum mismatch`},
		{name: "data after the tar end", archive: gz(t, append(makeTar(t, manifestEntry()), make([]byte, 2<<20)...)),
			want: `archive has more than 1 MiB of data after the end of the tar archive`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			archive := tt.archive
			if archive == nil {
				archive = makeArchive(t, append([]tarEntry{manifestEntry()}, tt.entries...)...)
			}
			base := t.TempDir()
			dir := filepath.Join(base, "x")
			tree, err := Extract(context.Background(), bytes.NewReader(archive), dir, tt.lim)
			require.Error(t, err)
			require.Nil(t, tree)
			require.ErrorIs(t, err, ErrInvalid)
			require.Contains(t, err.Error(), tt.want)
			require.Equal(t, tt.tooLarge, errors.Is(err, ErrTooLarge), "ErrTooLarge")
			var ve *ValidationError
			require.ErrorAs(t, err, &ve)
			entries, err := os.ReadDir(base)
			require.NoError(t, err)
			require.Len(t, entries, 1, "nothing written beside the target directory")
			for _, p := range listFiles(t, dir) {
				require.NotContains(t, p, "evil")
				require.NotContains(t, p, "passwd")
			}
		})
	}
}

func TestExtractDecompressionBombs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		lim  Limits
		// generate writes an endless archive to tw/raw until writing fails.
		generate func(tw *tar.Writer, raw io.Writer) error
		want     string
		// atHeader: the limit shows in a header, which refuses the archive
		// before the content it declares is inflated.
		atHeader bool
	}{
		{
			name: "10 GiB file declared, default limits",
			generate: func(tw *tar.Writer, raw io.Writer) error {
				if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "cairn.yaml", Size: int64(len(minimalManifest)), Mode: 0o644}); err != nil {
					return err
				}
				if _, err := tw.Write([]byte(minimalManifest)); err != nil {
					return err
				}
				if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "zeros", Size: 10 * GiB, Mode: 0o644}); err != nil {
					return err
				}
				return writeZeros(tw)
			},
			want:     `entry "zeros": file is 10 GiB, over the 512 MiB per-file limit`,
			atHeader: true,
		},
		{
			name: "endless 1 MiB files",
			lim:  Limits{MaxFileSize: 2 * MiB, MaxTotalSize: 8 * MiB},
			generate: func(tw *tar.Writer, raw io.Writer) error {
				zeros := make([]byte, MiB)
				for i := 0; ; i++ {
					if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "f" + strconv.Itoa(i), Size: MiB, Mode: 0o644}); err != nil {
						return err
					}
					if _, err := tw.Write(zeros); err != nil {
						return err
					}
				}
			},
			want: `entry "f8": bundle content exceeds the 8 MiB total limit`,
		},
		{
			name: "endless PAX headers",
			lim:  Limits{MaxEntries: 10, MaxTotalSize: MiB},
			generate: func(tw *tar.Writer, raw io.Writer) error {
				for {
					if err := writeRawPAX(raw, 512<<10); err != nil {
						return err
					}
				}
			},
			want: `uncompressed archive is larger than`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pr, pw := io.Pipe()
			var produced atomic.Int64 // uncompressed bytes generated
			done := make(chan struct{})
			go func() {
				defer close(done)
				zw, _ := gzip.NewWriterLevel(pw, gzip.BestSpeed)
				cw := &countWriter{w: zw, n: &produced}
				err := tt.generate(tar.NewWriter(cw), cw)
				pw.CloseWithError(err)
			}()
			src := &countReader{r: pr}
			_, err := Extract(context.Background(), src, filepath.Join(t.TempDir(), "x"), tt.lim)
			pr.CloseWithError(errors.New("test done"))
			<-done
			require.ErrorIs(t, err, ErrTooLarge)
			require.Contains(t, err.Error(), tt.want)
			lim := tt.lim.withDefaults()
			// The generator runs ahead of Extract by a few buffers at most.
			require.Less(t, produced.Load(), lim.maxStreamSize()+8*MiB, "uncompressed bytes produced")
			if tt.atHeader {
				// A few buffers of the declared content at most, however large it is.
				require.Less(t, produced.Load(), 16*MiB, "uncompressed bytes produced")
			}
			t.Logf("compressed bytes read: %d, uncompressed produced: %d", src.n, produced.Load())
		})
	}
}

func TestExtractErrorsThatAreNotInvalid(t *testing.T) {
	t.Parallel()
	archive := makeArchive(t, manifestEntry())

	t.Run("canceled context", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := Extract(ctx, bytes.NewReader(archive), t.TempDir(), Limits{})
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, ErrInvalid)
	})
	t.Run("reader fails", func(t *testing.T) {
		t.Parallel()
		boom := errors.New("connection reset")
		r := io.MultiReader(bytes.NewReader(archive[:20]), &failReader{err: boom})
		_, err := Extract(context.Background(), r, t.TempDir(), Limits{})
		require.ErrorIs(t, err, boom)
		require.NotErrorIs(t, err, ErrInvalid)
	})
	t.Run("directory not empty", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		writeFiles(t, dir, map[string]string{"old": "x"})
		_, err := Extract(context.Background(), bytes.NewReader(archive), dir, Limits{})
		require.ErrorContains(t, err, "is not empty")
		require.NotErrorIs(t, err, ErrInvalid)
	})
}

// writeZeros writes zeros to w until it fails.
func writeZeros(w io.Writer) error {
	zeros := make([]byte, 64*KiB)
	for {
		if _, err := w.Write(zeros); err != nil {
			return err
		}
	}
}

// writeRawPAX writes a PAX extended header block ('x') carrying a comment record of
// about size bytes, and its data, bypassing tar.Writer (which does not write them
// alone).
func writeRawPAX(w io.Writer, size int) error {
	body := " comment=" + strings.Repeat("a", size) + "\n"
	l := len(body) + 1
	for len(strconv.Itoa(l))+len(body) != l {
		l++
	}
	rec := strconv.Itoa(l) + body
	var hdr bytes.Buffer
	tw := tar.NewWriter(&hdr)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "PaxHeader", Size: int64(len(rec)), Mode: 0o644, Format: tar.FormatUSTAR}); err != nil {
		return err
	}
	block := hdr.Bytes()[:512]
	block[156] = tar.TypeXHeader
	setChecksum(block)
	if _, err := w.Write(block); err != nil {
		return err
	}
	padded := make([]byte, (len(rec)+511)/512*512)
	copy(padded, rec)
	_, err := w.Write(padded)
	return err
}

// setChecksum recomputes the checksum of a ustar header block.
func setChecksum(block []byte) {
	copy(block[148:156], "        ")
	sum := 0
	for _, c := range block {
		sum += int(c)
	}
	s := strconv.FormatInt(int64(sum), 8)
	s = strings.Repeat("0", 6-len(s)) + s
	copy(block[148:156], s+"\x00 ")
}

type countWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

type failReader struct{ err error }

func (f *failReader) Read([]byte) (int, error) { return 0, f.err }

// randomText returns n bytes that do not compress.
func randomText(n int) string {
	var b strings.Builder
	x := uint32(2463534242)
	for b.Len() < n {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b.WriteByte(byte('a' + x%26))
	}
	return b.String()
}

func truncate_(b []byte, n int) []byte { return b[:n] }

// flipByte inverts the byte at i (from the end when negative).
func flipByte(b []byte, i int) []byte {
	b = bytes.Clone(b)
	if i < 0 {
		i += len(b)
	}
	b[i] ^= 0xff
	return b
}
