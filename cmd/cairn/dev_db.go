package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/internal/devdb"
	"github.com/cairnrun/cairn/internal/pglocal"
)

// openDevCatalog prepares `cairn dev`'s database on cluster and opens the
// catalog on it as a role that is no superuser (package devdb); it returns the
// store and its URL.
func openDevCatalog(ctx context.Context, cluster *pglocal.Cluster, logger *slog.Logger, idempotencyTTL time.Duration) (*catalog.Store, string, error) {
	return devdb.Open(ctx, cluster, devDatabase, &devdb.Config{Logger: logger, IdempotencyTTL: idempotencyTTL, Password: newToken})
}
