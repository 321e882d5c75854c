// Package devdb prepares the catalog of a Cairn that keeps its database in a
// private PostgreSQL cluster (package pglocal): `cairn dev` and the servers of
// package cairntest. Both work as a role that is no superuser, as production does
// (docs/operations.md#the-database).
package devdb

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/internal/pglocal"
)

// The roles of the database. Neither is a superuser (which could run programs on
// the machine with COPY … TO PROGRAM) or may create databases or roles; each gets
// a new random password at every Open, which only the caller holds. The
// cluster's superuser, whose password is in <DataDir>/superuser-password, only
// creates them and the database.
const (
	// OwnerRole owns the database, its schema and every object in it, and
	// applies the migrations.
	OwnerRole = "cairn_owner"
	// AppRole is the role the server works as: it reads and writes rows and runs
	// the catalog's functions, and cannot change the schema.
	AppRole = "cairn_app"
)

// openTimeout bounds each connection's first contact with the database.
const openTimeout = 15 * time.Second

// Config tunes Open. A nil *Config means the defaults.
type Config struct {
	// Logger receives the catalog's and the migrations' logs; default discard.
	Logger *slog.Logger
	// IdempotencyTTL is the catalog's (catalog.Config); 0 is its default.
	IdempotencyTTL time.Duration
	// Password makes the roles' passwords; required: the caller's source of
	// random tokens.
	Password func() string
}

// Open prepares the database dbname on cluster and opens the catalog on it as
// AppRole; it returns the store and its URL. It makes the roles (new passwords
// for existing ones), creates the database owned by OwnerRole, or hands it over
// when an earlier version kept it as the superuser's, applies the migrations as
// OwnerRole and grants AppRole the use of the rows. The caller closes the store.
func Open(ctx context.Context, cluster *pglocal.Cluster, dbname string, cfg *Config) (*catalog.Store, string, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Password == nil {
		return nil, "", fmt.Errorf("devdb: Config.Password is required")
	}
	passwords := map[string]string{OwnerRole: c.Password(), AppRole: c.Password()}
	for role, password := range passwords {
		if err := cluster.CreateRole(ctx, role, password); err != nil {
			return nil, "", fmt.Errorf("database roles: %w", err)
		}
	}
	if err := cluster.CreateDatabase(ctx, dbname, OwnerRole); err != nil {
		return nil, "", err
	}
	owner, err := open(ctx, cluster.RoleURL(dbname, OwnerRole, passwords[OwnerRole]), c.Logger, 0)
	if err != nil {
		return nil, "", err
	}
	_, err = owner.Migrate(ctx, c.Logger.With("component", "migrate"))
	_ = owner.Close()
	if err != nil {
		return nil, "", err
	}
	if err := cluster.GrantAccess(ctx, dbname, AppRole); err != nil {
		return nil, "", err
	}
	url := cluster.RoleURL(dbname, AppRole, passwords[AppRole])
	store, err := open(ctx, url, c.Logger, c.IdempotencyTTL)
	if err != nil {
		return nil, "", err
	}
	return store, url, nil
}

// open opens the catalog at url, bounding the first contact by openTimeout.
func open(ctx context.Context, url string, logger *slog.Logger, idempotencyTTL time.Duration) (*catalog.Store, error) {
	ctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	return catalog.Open(ctx, url, &catalog.Config{Logger: logger, IdempotencyTTL: idempotencyTTL})
}
