package runtime

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/catalog"
)

// definitionLoadTimeout bounds one load of a version's definition. The load is shared
// by every attempt that needs the version meanwhile, so no single attempt's context
// governs it.
const definitionLoadTimeout = time.Minute

// compiledVersion is a workflow version compiled for the dispatcher (its step
// definitions by key; not catalog.Version, the catalog's row): immutable, so cached
// forever.
type compiledVersion struct {
	digest string
	// steps holds the steps of the DAG, their compensations (by
	// bundle.CompensateKey) and the on_failure steps, by key.
	steps map[string]*bundle.StepDefinition
	// handlers are the keys of the failure handlers: their envelope carries the
	// run's failure.
	handlers map[string]bool
}

// definitions caches compiled versions by workflow and number. Concurrent misses of
// one version share a single load: the first run of a large version starts many
// attempts at once, and each loading and parsing the definition (megabytes for
// thousands of steps) took the process to gigabytes. It is
// safe for concurrent use.
type definitions struct {
	store *catalog.Store
	load  func(ctx context.Context, workflow string, v int) (*compiledVersion, error) // loadVersion; tests count calls
	group singleflight.Group
	mu    sync.Mutex
	byKey map[string]*compiledVersion
}

func newDefinitions(store *catalog.Store) *definitions {
	d := &definitions{store: store, byKey: map[string]*compiledVersion{}}
	d.load = d.loadVersion
	return d
}

// get returns version v of workflow, loading it once for all concurrent callers. A
// caller whose ctx ends stops waiting; the load goes on for the others.
func (d *definitions) get(ctx context.Context, workflow string, v int) (*compiledVersion, error) {
	key := fmt.Sprintf("%s@%d", workflow, v)
	d.mu.Lock()
	cached := d.byKey[key]
	d.mu.Unlock()
	if cached != nil {
		return cached, nil
	}
	ch := d.group.DoChan(key, func() (any, error) {
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), definitionLoadTimeout)
		defer cancel()
		ver, err := d.load(lctx, workflow, v)
		if err != nil {
			return nil, err
		}
		d.mu.Lock()
		d.byKey[key] = ver
		d.mu.Unlock()
		return ver, nil
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return nil, res.Err
		}
		return res.Val.(*compiledVersion), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// loadVersion reads version v of workflow from the catalog and compiles it.
func (d *definitions) loadVersion(ctx context.Context, workflow string, v int) (*compiledVersion, error) {
	row, err := d.store.VersionGet(ctx, workflow, v)
	if err != nil {
		return nil, err
	}
	def, err := bundle.ParseDefinition(row.Definition)
	if err != nil {
		return nil, fmt.Errorf("definition of %s@%d: %w", workflow, v, err)
	}
	out := &compiledVersion{digest: row.BundleDigest, steps: make(map[string]*bundle.StepDefinition, len(def.Steps)),
		handlers: map[string]bool{}}
	for i := range def.Steps {
		st := &def.Steps[i]
		out.steps[st.Key] = st
		if c := st.Compensate; c != nil {
			out.steps[c.Key] = c
			out.handlers[c.Key] = true
		}
	}
	for i := range def.OnFailure {
		st := &def.OnFailure[i]
		out.steps[st.Key] = st
		out.handlers[st.Key] = true
	}
	return out, nil
}
