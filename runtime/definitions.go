package runtime

import (
	"context"
	"fmt"
	"sync"

	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/catalog"
)

// version is a compiled workflow version: immutable, so cached forever.
type version struct {
	digest string
	steps  map[string]*bundle.StepDefinition
}

// definitions caches compiled versions by workflow and number.
type definitions struct {
	store *catalog.Store
	mu    sync.Mutex
	byKey map[string]*version
}

func newDefinitions(store *catalog.Store) *definitions {
	return &definitions{store: store, byKey: map[string]*version{}}
}

func (d *definitions) get(ctx context.Context, workflow string, v int) (*version, error) {
	key := fmt.Sprintf("%s@%d", workflow, v)
	d.mu.Lock()
	cached := d.byKey[key]
	d.mu.Unlock()
	if cached != nil {
		return cached, nil
	}
	row, err := d.store.VersionGet(ctx, workflow, v)
	if err != nil {
		return nil, err
	}
	def, err := bundle.ParseDefinition(row.Definition)
	if err != nil {
		return nil, fmt.Errorf("definition of %s: %w", key, err)
	}
	out := &version{digest: row.BundleDigest, steps: map[string]*bundle.StepDefinition{}}
	for i := range def.Steps {
		out.steps[def.Steps[i].Key] = &def.Steps[i]
	}
	d.mu.Lock()
	d.byKey[key] = out
	d.mu.Unlock()
	return out, nil
}
