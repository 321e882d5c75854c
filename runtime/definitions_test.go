package runtime

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/internal/testenv"
)

// TestDefinitionsLoadOnceForConcurrentMisses: the first attempts of a large version,
// starting together, load and parse its definition once, not once each.
func TestDefinitionsLoadOnceForConcurrentMisses(t *testing.T) {
	t.Parallel()
	const steps, callers = 2000, 32
	ctx := context.Background()
	store := catalog.New(testenv.DB(t), nil)

	var m strings.Builder
	m.WriteString("name: large\nsteps:\n")
	for i := range steps {
		fmt.Fprintf(&m, "  - {key: s%d, builtin: noop}\n", i)
	}
	registerManifest(t, store, "large", m.String())

	d := newDefinitions(store)
	load := d.load
	var loads atomic.Int32
	allIn := make(chan struct{})
	d.load = func(ctx context.Context, workflow string, v int) (*compiledVersion, error) {
		if loads.Add(1) == callers {
			close(allIn)
		}
		// Holding the first load until every caller has missed the cache, so that
		// without coalescing each would load; with it, only one caller gets here
		// and the hold ends at the timeout.
		select {
		case <-allIn:
		case <-time.After(300 * time.Millisecond):
		}
		return load(ctx, workflow, v)
	}

	var wg sync.WaitGroup
	got := make([]*compiledVersion, callers)
	errs := make([]error, callers)
	for i := range callers {
		wg.Go(func() { got[i], errs[i] = d.get(ctx, "large", 1) })
	}
	wg.Wait()
	require.EqualValues(t, 1, loads.Load(), "loads of one version by concurrent callers")
	for i := range callers {
		require.NoError(t, errs[i])
		require.True(t, got[0] == got[i], "caller %d got another copy of the version", i)
	}
	require.Len(t, got[0].steps, steps)

	// Cached from now on.
	again, err := d.get(ctx, "large", 1)
	require.NoError(t, err)
	require.True(t, got[0] == again, "the cached version")
	require.EqualValues(t, 1, loads.Load())
}

// TestDefinitionsCallerStopsWaiting: a caller whose context ends stops waiting for a
// shared load, which goes on for the others.
func TestDefinitionsCallerStopsWaiting(t *testing.T) {
	t.Parallel()
	d := newDefinitions(nil)
	release := make(chan struct{})
	want := &compiledVersion{digest: "d"}
	d.load = func(ctx context.Context, workflow string, v int) (*compiledVersion, error) {
		<-release
		return want, ctx.Err()
	}
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, err := d.get(ctx, "wf", 1)
		first <- err
	}()
	type result struct {
		v   *compiledVersion
		err error
	}
	second := make(chan result, 1)
	go func() {
		v, err := d.get(context.Background(), "wf", 1)
		second <- result{v, err}
	}()
	cancel()
	require.ErrorIs(t, <-first, context.Canceled)
	close(release)
	res := <-second
	require.NoError(t, res.err)
	require.Same(t, want, res.v)
}

// TestDefinitionLoadWaitsOutAnOutage: an attempt whose definition cannot be loaded
// because PostgreSQL is down waits for it while it holds its lease, and goes on
// when the database is back, instead of failing; an attempt whose lease is lost
// meanwhile stops waiting, with that cause.
func TestDefinitionLoadWaitsOutAnOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg := testenv.PG(t)
	store, err := catalog.Open(ctx, testenv.ClusterDatabaseURL(t, pg), nil)
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	registerManifest(t, store, "small", "name: small\nsteps:\n  - {key: a, builtin: noop}\n")

	d := &Dispatcher{versions: newDefinitions(store)}
	newAttempt := func() (*attempt, context.Context, context.CancelCauseFunc) {
		actx, cancel := context.WithCancelCause(ctx)
		return &attempt{claim: catalog.Claimed{Workflow: "small", Version: 1}, base: slog.New(slog.DiscardHandler),
			done: actx.Done(), cancel: cancel}, actx, cancel
	}

	require.NoError(t, pg.Kill())
	// The lease is lost during the outage: the wait ends with that cause.
	a, actx, cancel := newAttempt()
	time.AfterFunc(500*time.Millisecond, func() { cancel(errLeaseLost) })
	_, err = d.loadVersion(actx, a)
	require.ErrorIs(t, err, errLeaseLost)

	// The database comes back while the attempt waits: it loads.
	a, actx, cancel = newAttempt()
	defer cancel(nil)
	restarted := make(chan error, 1)
	time.AfterFunc(time.Second, func() {
		sctx, scancel := context.WithTimeout(ctx, time.Minute)
		defer scancel()
		restarted <- pg.Start(sctx)
	})
	ver, err := d.loadVersion(actx, a)
	require.NoError(t, <-restarted)
	require.NoError(t, err, "the definition loads once the database is back")
	require.NotNil(t, ver.steps["a"])
}

// registerManifest registers version 1 of workflow from a manifest's text, with
// its normalized definition (no bundle behind it: the tests load definitions only).
func registerManifest(t *testing.T, store *catalog.Store, workflow, manifest string) {
	t.Helper()
	m, err := bundle.ParseManifest([]byte(manifest))
	require.NoError(t, err)
	def, err := m.Normalize()
	require.NoError(t, err)
	defJSON, err := def.CanonicalJSON()
	require.NoError(t, err)
	sum := sha256.Sum256(defJSON)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	_, _, err = store.VersionRegister(t.Context(), &catalog.VersionRegisterParams{
		Workflow: workflow, Digest: digest, Size: 1, BlobKey: "k", Definition: defJSON, Fingerprint: digest,
	})
	require.NoError(t, err)
}
