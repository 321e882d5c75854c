package bundle

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLoad(t *testing.T) {
	t.Parallel()
	archive := makeArchive(t,
		fileEntry("cairn.yaml", designManifest, 0o644),
		fileEntry("bin/fetch-real", "#!/bin/sh\n", 0o755),
		linkEntry("bin/fetch", "fetch-real"),
	)
	dir := filepath.Join(t.TempDir(), "x")
	b, err := Load(context.Background(), bytes.NewReader(archive), dir, Limits{})
	require.NoError(t, err)
	require.Equal(t, b.Tree.Digest(), b.Digest)
	fp, err := b.Definition.Fingerprint()
	require.NoError(t, err)
	require.Equal(t, fp, b.Fingerprint)
	require.Equal(t, "doc-pipeline", b.Manifest.Name)
	require.Equal(t, "doc-pipeline", b.Definition.Name)

	// The canonical archive loads to the same bundle.
	var canonical bytes.Buffer
	require.NoError(t, WriteCanonical(context.Background(), dir, b.Tree, &canonical))
	again, err := Load(context.Background(), &canonical, filepath.Join(t.TempDir(), "x"), Limits{})
	require.NoError(t, err)
	require.Equal(t, b.Digest, again.Digest)
	require.Equal(t, b.Fingerprint, again.Fingerprint)

	// So does the folder.
	fromDir, err := LoadDir(context.Background(), dir, Limits{})
	require.NoError(t, err)
	require.Equal(t, b.Digest, fromDir.Digest)
	require.Equal(t, b.Fingerprint, fromDir.Fingerprint)
}

func TestLoadReportsEveryManifestError(t *testing.T) {
	t.Parallel()
	manifest := `name: demo
steps:
  - key: fetch
    exec: [./bin/fetch]
  - key: use
    needs: [fetch, missing]
    builtin: echo
    timeout: 48h
`
	archive := makeArchive(t, fileEntry("cairn.yaml", manifest, 0o644), fileEntry("bin/fetch", "#!/bin/sh\n", 0o644))
	_, err := Load(context.Background(), bytes.NewReader(archive), filepath.Join(t.TempDir(), "x"), Limits{})
	require.ErrorIs(t, err, ErrInvalid)
	require.NotErrorIs(t, err, ErrTooLarge)
	require.Equal(t, []string{
		`cairn.yaml: step "fetch": exec: program "./bin/fetch" is not executable (mode 0644): set its execute bit`,
		`cairn.yaml: step "use": needs: needs unknown step "missing"`,
		`cairn.yaml: step "use": timeout: timeout 48h0m0s is over the 24h limit`,
	}, messages(err))
}

// TestPackStream: the archive PackStream gives is the folder's canonical archive
// (Load reads it back to the same digest); a folder Pack refuses makes Close
// return why; a reader that stops early stops the packing, which is no error.
func TestPackStream(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"cairn.yaml": "name: packed\nsteps:\n  - {key: a, builtin: noop}\n",
		"data.txt":   strings.Repeat("x", 1<<20),
	})
	want, err := LoadDir(ctx, dir, Limits{})
	require.NoError(t, err)
	archive := PackStream(ctx, dir)
	b, err := Load(ctx, archive, filepath.Join(t.TempDir(), "tree"), Limits{})
	require.NoError(t, err)
	require.NoError(t, archive.Close())
	require.Equal(t, want.Digest, b.Digest)

	archive = PackStream(ctx, dir)
	_, err = archive.Read(make([]byte, 10))
	require.NoError(t, err)
	require.NoError(t, archive.Close(), "stopped by its reader")
	require.NoError(t, archive.Close(), "twice")

	bad := t.TempDir()
	writeFiles(t, bad, map[string]string{"cairn.yaml": "name: Bad\nsteps: []\n"})
	archive = PackStream(ctx, bad)
	_, err = io.ReadAll(archive)
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorIs(t, archive.Close(), ErrInvalid)
}
