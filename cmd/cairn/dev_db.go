package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/internal/pglocal"
)

// The roles of `cairn dev`'s database. Neither is a superuser (which could run
// programs on the machine with COPY … TO PROGRAM) or may create databases or
// roles; each gets a new random password at every start, which only this process
// holds. The cluster's superuser, whose password is in
// <data-dir>/pg/superuser-password, only creates them and the database.
const (
	// devOwnerRole owns the database, its schema and every object in it, and
	// applies the migrations.
	devOwnerRole = "cairn_owner"
	// devAppRole is the role the server works as: it reads and writes rows and
	// runs the catalog's functions, and cannot change the schema.
	devAppRole = "cairn_app"
)

// openDevCatalog prepares `cairn dev`'s database on cluster and opens the
// catalog on it as devAppRole; it returns the store and its URL. It makes the
// roles (new passwords for existing ones), creates the database owned by
// devOwnerRole, or hands it over when an earlier version kept it as the
// superuser's, applies the migrations as devOwnerRole and grants devAppRole
// the use of the rows.
func openDevCatalog(ctx context.Context, cluster *pglocal.Cluster, logger *slog.Logger, idempotencyTTL time.Duration) (*catalog.Store, string, error) {
	passwords := map[string]string{devOwnerRole: newToken(), devAppRole: newToken()}
	for role, password := range passwords {
		if err := cluster.CreateRole(ctx, role, password); err != nil {
			return nil, "", fmt.Errorf("database roles: %w", err)
		}
	}
	if err := cluster.CreateDatabase(ctx, devDatabase, devOwnerRole); err != nil {
		return nil, "", err
	}
	owner, err := openStore(ctx, cluster.RoleURL(devDatabase, devOwnerRole, passwords[devOwnerRole]), logger, 0, false)
	if err != nil {
		return nil, "", err
	}
	_, err = owner.Migrate(ctx, logger.With("component", "migrate"))
	_ = owner.Close()
	if err != nil {
		return nil, "", err
	}
	if err := cluster.GrantAccess(ctx, devDatabase, devAppRole); err != nil {
		return nil, "", err
	}
	url := cluster.RoleURL(devDatabase, devAppRole, passwords[devAppRole])
	store, err := openStore(ctx, url, logger, idempotencyTTL, false)
	if err != nil {
		return nil, "", err
	}
	return store, url, nil
}
