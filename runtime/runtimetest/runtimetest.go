// Package runtimetest runs dispatchers for tests, as catalogtest builds rows: a
// test's catalog and blob store (Env), bundles deployed as the API deploys them,
// runs started and waited for, and dispatchers stopped when the test ends. It is
// imported by tests only (runtime's and maintenance's).
package runtimetest

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/internal/deploy"
	"github.com/cairnrun/cairn/internal/testenv"
	"github.com/cairnrun/cairn/runtime"
)

// Env is a test's catalog, on a fresh migrated database (testenv.DatabaseURL), and
// its blob store, a file store in a temporary folder.
type Env struct {
	Store       *catalog.Store
	Blobs       blobstore.Store
	DatabaseURL string
}

// New returns a test's Env; the store is closed when the test ends.
func New(t testing.TB) *Env {
	t.Helper()
	url := testenv.DatabaseURL(t)
	store, err := catalog.Open(context.Background(), url, nil)
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	blobs, err := blobstore.NewFile(t.TempDir(), nil)
	require.NoError(t, err)
	return &Env{Store: store, Blobs: blobs, DatabaseURL: url}
}

// Dispatcher returns a dispatcher over the Env, not started. Unless cfg sets them: a
// cache folder of the test's, a poll interval of 50 ms, and the Env's database for
// notifications.
func (e *Env) Dispatcher(t testing.TB, cfg runtime.Config) *runtime.Dispatcher {
	t.Helper()
	if cfg.Handlers.CacheDir == "" {
		cfg.Handlers.CacheDir = t.TempDir()
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 50 * time.Millisecond
	}
	if cfg.DatabaseURL == "" {
		cfg.DatabaseURL = e.DatabaseURL
	}
	d, err := runtime.New(e.Store, e.Blobs, &cfg)
	require.NoError(t, err)
	return d
}

// Start runs a dispatcher over the Env (as Dispatcher makes it) until the test ends;
// its Stop must then return nil.
func (e *Env) Start(t testing.TB, cfg runtime.Config) *runtime.Dispatcher {
	t.Helper()
	d := e.Dispatcher(t, cfg)
	require.NoError(t, d.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, d.Stop(ctx))
	})
	return d
}

// Deploy writes a bundle folder from files (path → content; paths under bin/ are
// executable), packs it and deploys the archive as the API does (deploy.Register).
func (e *Env) Deploy(t testing.TB, files map[string]string) *catalog.Version {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	for p, content := range files {
		full := filepath.Join(dir, p)
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		mode := os.FileMode(0o644)
		if strings.HasPrefix(p, "bin/") {
			mode = 0o755
		}
		require.NoError(t, os.WriteFile(full, []byte(content), mode))
	}
	var archive bytes.Buffer
	_, err := bundle.Pack(ctx, dir, &archive)
	require.NoError(t, err)
	v, _, err := deploy.Register(ctx, e.Store, e.Blobs, &archive, &deploy.Config{TempDir: t.TempDir()})
	require.NoError(t, err)
	return v
}

// StartRun creates a run of version v with input (JSON; empty: none) and returns its
// ID.
func (e *Env) StartRun(t testing.TB, v *catalog.Version, input string) uuid.UUID {
	t.Helper()
	p := &catalog.RunCreateParams{Workflow: v.Workflow, Version: v.Version}
	if input != "" {
		p.Input = json.RawMessage(input)
	}
	run, _, err := e.Store.RunCreate(context.Background(), p)
	require.NoError(t, err)
	return run.ID
}

// WaitRun waits until the run is terminal, for up to within, and returns it.
func (e *Env) WaitRun(t testing.TB, id uuid.UUID, within time.Duration) *catalog.Run {
	t.Helper()
	var run *catalog.Run
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		r, err := e.Store.RunGet(context.Background(), id)
		require.NoError(c, err)
		require.True(c, r.FinishedAt != nil, "run %s is %s", id, r.Status)
		run = r
	}, within, 20*time.Millisecond, "waiting for run %s to finish", id)
	return run
}
