package bundle

import (
	"archive/tar"
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// updateSeeds rewrites testdata/archives from seedArchives:
//
//	go test ./bundle -run TestSeedArchives -update-seeds
var updateSeeds = flag.Bool("update-seeds", false, "rewrite testdata/archives")

// seedArchives are the archives of testdata/archives: "ok-" ones extract, "bad-" ones
// are rejected. They seed FuzzExtract.
func seedArchives(t testing.TB) map[string][]byte {
	m := manifestEntry()
	return map[string][]byte{
		"ok-minimal.tar.gz": makeArchive(t, m),
		"ok-demo.tar.gz": makeArchive(t, dirEntry("./"), fileEntry("./cairn.yaml", execManifest, 0o644),
			dirEntry("./bin/"), fileEntry("./bin/fetch", "#!/bin/sh\necho fetched\n", 0o755),
			fileEntry("lib/a.txt", "alpha", 0o600), linkEntry("fetch", "bin/fetch"), linkEntry("lib/up", "..")),
		"ok-hardlink.tar.gz": makeArchive(t, m, fileEntry("a", "shared", 0o644), hardlinkEntry("b", "a")),
		"ok-pax-long-path.tar.gz": makeArchive(t, m,
			tarEntry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: strings.Repeat("d/", 70) + "f", Size: 1, Mode: 0o644, Format: tar.FormatPAX}, body: "x"}),
		"ok-gnu.tar.gz":             makeArchive(t, tarEntry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "cairn.yaml", Size: int64(len(minimalManifest)), Mode: 0o644, Format: tar.FormatGNU}, body: minimalManifest}),
		"bad-dotdot.tar.gz":         makeArchive(t, m, fileEntry("../evil", "x", 0o644)),
		"bad-absolute.tar.gz":       makeArchive(t, m, fileEntry("/tmp/evil", "x", 0o644)),
		"bad-symlink-escape.tar.gz": makeArchive(t, m, linkEntry("a", "."), fileEntry("d/f", "x", 0o644), linkEntry("d/y", "../a/..")),
		"bad-write-through-link.tar.gz": makeArchive(t, m, fileEntry("dir/f", "x", 0o644), linkEntry("lnk", "dir"),
			fileEntry("lnk/evil", "x", 0o644)),
		"bad-device.tar.gz":           makeArchive(t, m, tarEntry{hdr: tar.Header{Typeflag: tar.TypeChar, Name: "null", Devmajor: 1, Devminor: 3}}),
		"bad-duplicate.tar.gz":        makeArchive(t, m, m),
		"bad-no-manifest.tar.gz":      makeArchive(t, fileEntry("main.sh", "#!/bin/sh\n", 0o755)),
		"bad-hardlink-outside.tar.gz": makeArchive(t, m, hardlinkEntry("h", "/etc/passwd")),
	}
}

func TestSeedArchives(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("testdata", "archives")
	if *updateSeeds {
		require.NoError(t, os.MkdirAll(dir, 0o755))
		for name, data := range seedArchives(t) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o644))
		}
	}
	seeds := readSeeds(t, "archives")
	require.Len(t, seeds, len(seedArchives(t)), "run with -update-seeds")
	for name, data := range seeds {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := Load(context.Background(), bytes.NewReader(data), filepath.Join(t.TempDir(), "x"), Limits{})
			if strings.HasPrefix(name, "ok-") {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, ErrInvalid)
			}
		})
	}
}

func TestSeedManifests(t *testing.T) {
	t.Parallel()
	seeds := readSeeds(t, "manifests")
	require.NotEmpty(t, seeds)
	for name, data := range seeds {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m, err := ParseManifest(data)
			if err == nil {
				_, err = m.Normalize()
			}
			if strings.HasPrefix(name, "ok-") {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, ErrInvalid)
				t.Log(err)
			}
		})
	}
}

// readSeeds returns the files of testdata/<sub> by name.
func readSeeds(t testing.TB, sub string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join("testdata", sub))
	require.NoError(t, err)
	out := make(map[string][]byte, len(entries))
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join("testdata", sub, e.Name()))
		require.NoError(t, err)
		out[e.Name()] = data
	}
	return out
}

// fuzzLimits keep the fuzzer's disk use small.
var fuzzLimits = Limits{MaxEntries: 64, MaxFileSize: 256 * KiB, MaxTotalSize: MiB, MaxManifestSize: 64 * KiB, MaxArchiveSize: MiB}

// FuzzExtract feeds Extract archives: gzip input as is, anything else gzipped first (so
// that mutations reach the tar layer). Extract must not panic, must only fail with
// ErrInvalid (the input is in memory: there are no I/O errors to blame), must write
// nothing outside its directory and leave no symlink pointing out of it, and on
// success must produce a tree whose canonical archive extracts to the same digest.
func FuzzExtract(f *testing.F) {
	for _, data := range readSeeds(f, "archives") {
		f.Add(data)
	}
	f.Add(makeTar(f, manifestEntry(), linkEntry("l", "sub/../x"), fileEntry("x", "", 0o755)))
	f.Add(makeTar(f, manifestEntry(), dirEntry("a/"), linkEntry("a/b", "../a"), hardlinkEntry("c", "cairn.yaml")))
	f.Fuzz(func(t *testing.T, data []byte) {
		if !bytes.HasPrefix(data, []byte{0x1f, 0x8b}) {
			data = gz(t, data)
		}
		base, err := filepath.EvalSymlinks(t.TempDir())
		require.NoError(t, err)
		dir := filepath.Join(base, "x")
		tree, err := Extract(context.Background(), bytes.NewReader(data), dir, fuzzLimits)

		entries, rerr := os.ReadDir(base)
		require.NoError(t, rerr)
		require.Len(t, entries, 1, "only the target directory in its parent")
		require.NoError(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.Type()&os.ModeSymlink == 0 {
				return err
			}
			target, err := filepath.EvalSymlinks(p)
			if err != nil {
				return nil // dangling links are only left behind by failed extractions
			}
			require.True(t, target == dir || strings.HasPrefix(target, dir+string(filepath.Separator)), "%s -> %s leaves", p, target)
			return nil
		}))
		if err != nil {
			require.ErrorIs(t, err, ErrInvalid)
			require.Nil(t, tree)
			return
		}
		for i, e := range tree.Entries {
			require.NotEmpty(t, e.Path)
			if i > 0 {
				require.Less(t, tree.Entries[i-1].Path, e.Path)
			}
		}
		var canonical bytes.Buffer
		require.NoError(t, WriteCanonical(context.Background(), dir, tree, &canonical))
		again, err := Extract(context.Background(), &canonical, filepath.Join(base, "y"), fuzzLimits)
		require.NoError(t, err)
		require.Equal(t, tree.Digest(), again.Digest())
	})
}

// FuzzParseManifest feeds ParseManifest YAML: it must not panic, must only fail with
// ErrInvalid, and a valid manifest must normalize to a definition whose canonical
// JSON reads back to the same fingerprint.
func FuzzParseManifest(f *testing.F) {
	for _, data := range readSeeds(f, "manifests") {
		f.Add(data)
	}
	f.Add([]byte(designManifest))
	f.Add([]byte(minimalManifest))
	f.Add([]byte("name: a\nsteps:\n  - {key: a, needs: [b], builtin: noop}\n  - {key: b, needs: [a], builtin: noop}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseManifest(data)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalid)
			require.NotEmpty(t, ValidationErrors(err))
			return
		}
		verr := m.Validate(nil)
		def, err := m.Normalize()
		if verr != nil {
			require.ErrorIs(t, verr, ErrInvalid)
			require.Error(t, err)
			for _, ve := range ValidationErrors(verr) {
				require.NotEmpty(t, ve.Field, ve.Error())
			}
			return
		}
		require.NoError(t, err)
		require.Len(t, def.Steps, len(m.Steps))
		fp, err := def.Fingerprint()
		require.NoError(t, err)
		raw, err := def.CanonicalJSON()
		require.NoError(t, err)
		back, err := ParseDefinition(raw)
		require.NoError(t, err)
		fp2, err := back.Fingerprint()
		require.NoError(t, err)
		require.Equal(t, fp, fp2)
	})
}
