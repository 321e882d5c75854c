package maintenance

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/cairnrun/cairn/catalog"
)

// registryBeat is how often a registry writes its dispatcher's row
// (catalog.Store.DispatcherBeat); catalog.DispatcherLive is three of them.
const registryBeat = 5 * time.Second

// RegistryConfig tunes a Registry. A nil *RegistryConfig means defaults.
type RegistryConfig struct {
	// Logger; default discard.
	Logger *slog.Logger
}

// Registry keeps one dispatcher's row, with its tags, in the catalog's registry of
// live dispatchers (a step whose runs_on no live dispatcher has all of shows
// blocked_by no_dispatcher): a beat every 5 s from Start, and the row removed at
// Stop. cairn serve stops it before its dispatcher, so that the dispatcher leaves
// the registry when it stops claiming.
//
// Create it with NewRegistry; run it with Start and Stop. It is safe for concurrent
// use.
type Registry struct {
	loop
	store  *catalog.Store
	id     string
	tags   []string
	logger *slog.Logger
}

// NewRegistry returns the registry of dispatcher id with tags (runtime.Dispatcher's
// ID and Tags). It returns an error for an empty id.
func NewRegistry(store *catalog.Store, id string, tags []string, cfg *RegistryConfig) (*Registry, error) {
	if id == "" {
		return nil, errors.New("registry: no dispatcher name")
	}
	var c RegistryConfig
	if cfg != nil {
		c = *cfg
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return &Registry{loop: loop{name: "registry"}, store: store, id: id, tags: tags,
		logger: c.Logger.With("component", "registry")}, nil
}

// Start writes the row now and every 5 s until Stop.
func (r *Registry) Start(ctx context.Context) error {
	return r.start(ctx, func(ctx context.Context) {
		t := time.NewTicker(registryBeat)
		defer t.Stop()
		for {
			if err := r.store.DispatcherBeat(ctx, r.id, r.tags); err != nil && ctx.Err() == nil {
				r.logger.Warn("dispatcher registry heartbeat failed", "error", err)
			}
			select {
			case <-t.C:
			case <-ctx.Done():
				gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				if err := r.store.DispatcherGone(gctx, r.id); err != nil {
					r.logger.Debug("dispatcher registry removal failed", "error", err)
				}
				cancel()
				return
			}
		}
	})
}

// Stop removes the row (waiting up to 5 s for the catalog) and ends the beats, or
// returns when ctx ends first.
func (r *Registry) Stop(ctx context.Context) error { return r.stop(ctx) }
