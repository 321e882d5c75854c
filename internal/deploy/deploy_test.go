package deploy_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/internal/deploy"
	"github.com/cairnrun/cairn/internal/testenv"
)

type testBundle struct {
	store   *catalog.Store
	blobs   blobstore.Store
	tempDir string
}

func setup(t *testing.T) (context.Context, *testBundle) {
	t.Helper()
	blobs, err := blobstore.NewFile(t.TempDir(), nil)
	require.NoError(t, err)
	return t.Context(), &testBundle{store: catalog.New(testenv.DB(t), nil), blobs: blobs, tempDir: t.TempDir()}
}

// pack returns the archive of a bundle holding only manifest as cairn.yaml.
func pack(t *testing.T, manifest string) []byte {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, bundle.ManifestPath), []byte(manifest), 0o644))
	var archive bytes.Buffer
	_, err := bundle.Pack(t.Context(), dir, &archive)
	require.NoError(t, err)
	return archive.Bytes()
}

const diamond = `
name: diamond
description: a → (b, c) → d
steps:
  - {key: a, builtin: noop, retry: {max_attempts: 3}}
  - {key: b, needs: [a], builtin: noop, retry: {on_exhausted: pause}}
  - {key: c, needs: [a], builtin: noop}
  - {key: d, needs: [c, b], builtin: noop}
`

// TestRegisterLaysOutSteps: the version's runs start with the bundle's steps, their
// needs, attempts and on_exhausted; the canonical archive is stored under the tree digest.
func TestRegisterLaysOutSteps(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	v, created, err := deploy.Register(ctx, tb.store, tb.blobs, bytes.NewReader(pack(t, diamond)), &deploy.Config{TempDir: tb.tempDir})
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, "diamond", v.Workflow)
	require.Equal(t, 1, v.Version)

	b, err := tb.store.BundleGet(ctx, v.BundleDigest)
	require.NoError(t, err)
	obj, err := tb.blobs.Stat(ctx, b.BlobKey)
	require.NoError(t, err)
	require.Equal(t, v.BundleSize, obj.Size)

	run, _, err := tb.store.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "diamond"})
	require.NoError(t, err)
	require.Equal(t, 4, run.StepsTotal)
	steps, err := tb.store.StepList(ctx, run.ID)
	require.NoError(t, err)
	type layout struct {
		needs       []string
		maxAttempts int
		onExhausted catalog.OnExhausted
		status      catalog.StepStatus
	}
	got := map[string]layout{}
	for _, st := range steps {
		got[st.Key] = layout{[]string(st.Needs), st.MaxAttempts, st.OnExhausted, st.Status}
	}
	require.Equal(t, map[string]layout{
		"a": {[]string{}, 3, catalog.OnExhaustedFail, catalog.StepReady},
		"b": {[]string{"a"}, 1, catalog.OnExhaustedPause, catalog.StepWaiting},
		"c": {[]string{"a"}, 1, catalog.OnExhaustedFail, catalog.StepWaiting},
		"d": {[]string{"b", "c"}, 1, catalog.OnExhaustedFail, catalog.StepWaiting},
	}, got)

	entries, err := os.ReadDir(tb.tempDir)
	require.NoError(t, err)
	require.Empty(t, entries, "the extracted bundle is removed")
}

// TestRegisterTwice: the same bundle again is the same version, not created.
func TestRegisterTwice(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	archive := pack(t, diamond)
	first, created, err := deploy.Register(ctx, tb.store, tb.blobs, bytes.NewReader(archive), nil)
	require.NoError(t, err)
	require.True(t, created)
	second, created, err := deploy.Register(ctx, tb.store, tb.blobs, bytes.NewReader(archive), nil)
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, first.Version, second.Version)
	require.Equal(t, first.BundleDigest, second.BundleDigest)
	// The bundle's key was claimed against the blob collector, which keeps it.
	key, err := blobstore.KeyFor(blobstore.KindBundles, first.BundleDigest)
	require.NoError(t, err)
	refs, err := tb.store.BlobsKept(ctx, []string{key}, time.Hour)
	require.NoError(t, err)
	require.True(t, refs[key])
	var claims int
	require.NoError(t, tb.store.DB().GetContext(ctx, &claims, `SELECT count(*) FROM blob_claims WHERE blob_key = $1`, key))
	require.Equal(t, 1, claims)
}

// TestRegisterRefusesInvalid: an invalid bundle is bundle.ErrInvalid, and nothing
// is stored.
func TestRegisterRefusesInvalid(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	blobDir := t.TempDir()
	blobs, err := blobstore.NewFile(blobDir, nil)
	require.NoError(t, err)
	tests := []struct {
		name string
		body []byte
		lim  bundle.Limits
	}{
		{name: "not an archive", body: []byte("not gzip")},
		{name: "over the step limit", body: pack(t, diamond), lim: bundle.Limits{MaxSteps: 2}},
	}
	for _, tt := range tests {
		_, _, err := deploy.Register(ctx, tb.store, blobs, bytes.NewReader(tt.body), &deploy.Config{Limits: tt.lim})
		require.ErrorIs(t, err, bundle.ErrInvalid, tt.name)
	}
	var n int
	require.NoError(t, tb.store.DB().Get(&n, `SELECT (SELECT count(*) FROM bundles) + (SELECT count(*) FROM workflows)`))
	require.Zero(t, n)
	var files []string
	require.NoError(t, filepath.WalkDir(blobDir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
		}
		return err
	}))
	require.Empty(t, files)
}

// TestRegisterMovesLatest: a deploy moves latest to its version unless NoPromote;
// redeploying an old bundle (nothing stored again) makes it latest again, and the
// moves name the deploying actor.
func TestRegisterMovesLatest(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	deployManifest := func(manifest string, cfg deploy.Config) *catalog.Version {
		t.Helper()
		cfg.TempDir = tb.tempDir
		v, _, err := deploy.Register(ctx, tb.store, tb.blobs, bytes.NewReader(pack(t, manifest)), &cfg)
		require.NoError(t, err)
		return v
	}
	latest := func() int {
		t.Helper()
		v, err := tb.store.AliasResolve(ctx, "diamond", catalog.AliasLatest)
		require.NoError(t, err)
		return v
	}
	v1 := deployManifest(diamond, deploy.Config{Actor: "alice"})
	require.Equal(t, v1.Version, latest())
	v2 := deployManifest(diamond+"  - {key: e, needs: [d], builtin: noop}\n", deploy.Config{NoPromote: true, Actor: "bob"})
	require.Equal(t, v1.Version, latest(), "NoPromote leaves latest")
	v3 := deployManifest(diamond+"  - {key: f, needs: [d], builtin: noop}\n", deploy.Config{Actor: "carol"})
	require.Equal(t, v3.Version, latest())
	again := deployManifest(diamond, deploy.Config{Actor: "dave"})
	require.Equal(t, v1.Version, again.Version)
	require.Equal(t, v1.Version, latest(), "redeploying an old bundle makes it latest again")
	require.Equal(t, v1.Version+1, v2.Version)

	h, err := tb.store.AliasHistory(ctx, "diamond", catalog.AliasLatest, 10)
	require.NoError(t, err)
	require.Len(t, h, 3)
	require.Equal(t, "dave", h[0].Actor)
	require.Equal(t, catalog.AliasDeploy, h[0].Kind)
	require.Equal(t, v3.Version, *h[0].PreviousVersion)
}
