package testrun

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lib/pq"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/internal/deploy"
	"github.com/cairnrun/cairn/internal/pglocal"
)

// templateDB is the database every case's database is cloned from: migrated,
// with the virtual clock and the bundle under test.
const templateDB = "cairn_test_template"

// Env is the embedded catalog cases run on: a private PostgreSQL cluster
// (internal/pglocal, from the installed binaries, as `cairn dev` starts one)
// in a temporary folder, a template database and a file blob store. Create it
// with StartEnv and end it with Close. Safe for concurrent use.
type Env struct {
	dir     string
	cluster *pglocal.Cluster
	blobs   *blobstore.FileStore
	logger  *slog.Logger
	n       atomic.Int64
	// cloneMu serializes the clones of the template: PostgreSQL refuses a
	// second CREATE DATABASE … TEMPLATE while one copies it.
	cloneMu sync.Mutex
	// spare holds databases cloned ahead (a clone takes a few hundred
	// milliseconds), so that a case starts on one at once; bg tracks the
	// clones and drops under way in the background.
	spare   chan *database
	bg      sync.WaitGroup
	ownDir  bool
	closing atomic.Bool
}

// spareDatabases is how many databases an Env clones ahead.
const spareDatabases = 2

// EnvConfig tunes StartEnv. The zero value is usable.
type EnvConfig struct {
	// Dir holds the cluster, the blobs and the handlers' cache; default a new
	// temporary folder, removed by Close.
	Dir string
	// Logger receives the cluster's and the runtime's logs; default discard.
	Logger *slog.Logger
	// Getenv reads $CAIRN_PG_BIN and $PATH to find PostgreSQL; default os.Getenv.
	Getenv func(string) string
}

// StartEnv starts the cluster, migrates the template database and installs its
// virtual clock. It fails with pglocal's error when no PostgreSQL binaries are
// installed.
func StartEnv(ctx context.Context, cfg EnvConfig) (_ *Env, err error) {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	dir := cfg.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "cairn-test-"); err != nil {
			return nil, err
		}
		// The cluster may run as the postgres account (when we are root): it
		// must reach its data directory.
		if err := os.Chmod(dir, 0o755); err != nil {
			return nil, err
		}
	}
	e := &Env{dir: dir, logger: logger, ownDir: cfg.Dir == "", spare: make(chan *database, spareDatabases)}
	defer func() {
		if err != nil {
			_ = e.Close(context.WithoutCancel(ctx))
		}
	}()
	e.cluster, err = pglocal.Start(ctx, pglocal.Config{
		DataDir: filepath.Join(dir, "pg"),
		Logger:  logger,
		Getenv:  cfg.Getenv,
		// A throw-away cluster: durability buys nothing here.
		Settings:      map[string]string{"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"},
		DieWithParent: true,
	})
	if err != nil {
		return nil, fmt.Errorf("start PostgreSQL: %w", err)
	}
	if e.blobs, err = blobstore.NewFile(filepath.Join(dir, "blobs"), nil); err != nil {
		return nil, err
	}
	if err := e.admin(ctx, "CREATE DATABASE "+pq.QuoteIdentifier(templateDB)); err != nil {
		return nil, err
	}
	store, err := e.open(ctx, templateDB)
	if err != nil {
		return nil, err
	}
	defer store.Close()
	if _, err := store.Migrate(ctx, logger.With("component", "migrate")); err != nil {
		return nil, err
	}
	if err := store.InstallVirtualClock(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

// Deploy registers the bundle folder dir in the template database, so that
// every case's database has it; call it before the cases run, and not while
// they run.
func (e *Env) Deploy(ctx context.Context, dir string) (*catalog.Version, error) {
	e.dropSpares(ctx) // cloned before this deploy: they lack the bundle
	store, err := e.open(ctx, templateDB)
	if err != nil {
		return nil, err
	}
	defer store.Close()
	pr, pw := io.Pipe()
	go func() {
		_, err := bundle.Pack(ctx, dir, pw)
		pw.CloseWithError(err)
	}()
	v, _, err := deploy.Register(ctx, store, e.blobs, pr, &deploy.Config{TempDir: e.dir})
	_ = pr.Close()
	if err != nil {
		return nil, fmt.Errorf("deploy %s: %w", dir, err)
	}
	return v, nil
}

// database is one case's database: a clone of the template, on the virtual
// clock.
type database struct {
	name  string
	url   string
	store *catalog.Store
}

// newDatabase returns a clone of the template for one case: a spare one when
// there is one, and clones another in the background.
func (e *Env) newDatabase(ctx context.Context) (*database, error) {
	var db *database
	select {
	case db = <-e.spare:
	default:
		var err error
		if db, err = e.clone(ctx); err != nil {
			return nil, err
		}
	}
	e.bg.Add(1)
	go func() {
		defer e.bg.Done()
		if e.closing.Load() || len(e.spare) >= spareDatabases {
			return
		}
		d, err := e.clone(context.WithoutCancel(ctx))
		if err != nil {
			return // the next newDatabase clones in the foreground and reports it
		}
		select {
		case e.spare <- d:
		default:
			e.dropNow(context.WithoutCancel(ctx), d)
		}
	}()
	return db, nil
}

// dropSpares drops the databases cloned ahead.
func (e *Env) dropSpares(ctx context.Context) {
	e.bg.Wait()
	for {
		select {
		case d := <-e.spare:
			e.dropNow(ctx, d)
		default:
			return
		}
	}
}

// clone clones the template.
func (e *Env) clone(ctx context.Context) (*database, error) {
	name := fmt.Sprintf("cairn_case_%d", e.n.Add(1))
	e.cloneMu.Lock()
	err := e.admin(ctx, "CREATE DATABASE "+pq.QuoteIdentifier(name)+" TEMPLATE "+pq.QuoteIdentifier(templateDB)+" STRATEGY FILE_COPY")
	e.cloneMu.Unlock()
	if err != nil {
		return nil, err
	}
	// The clock's functions come before pg_catalog's (catalog.ClockSearchPath).
	if err := e.admin(ctx, "ALTER DATABASE "+pq.QuoteIdentifier(name)+" SET search_path = "+catalog.ClockSearchPath); err != nil {
		return nil, err
	}
	store, err := e.open(ctx, name)
	if err != nil {
		return nil, err
	}
	return &database{name: name, url: e.cluster.URL(name), store: store}, nil
}

// drop closes and drops a case's database, in the background.
func (e *Env) drop(ctx context.Context, db *database) {
	e.bg.Add(1)
	go func() {
		defer e.bg.Done()
		e.dropNow(context.WithoutCancel(ctx), db)
	}()
}

func (e *Env) dropNow(ctx context.Context, db *database) {
	_ = db.store.Close()
	if err := e.admin(ctx, "DROP DATABASE IF EXISTS "+pq.QuoteIdentifier(db.name)+" WITH (FORCE)"); err != nil {
		e.logger.Warn("drop a case's database", "database", db.name, "error", err)
	}
}

func (e *Env) open(ctx context.Context, dbname string) (*catalog.Store, error) {
	return catalog.Open(ctx, e.cluster.URL(dbname), &catalog.Config{Logger: e.logger, MaxOpenConns: 8})
}

// admin runs a statement of cluster administration (databases, their
// settings) as the superuser, on the database postgres. This is not catalog
// SQL: it takes no input but names quoted here.
func (e *Env) admin(ctx context.Context, stmt string) error {
	db, err := sql.Open("postgres", e.cluster.URL("postgres"))
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, stmt); err != nil {
		return fmt.Errorf("%s: %w", stmt, err)
	}
	return nil
}

// Close stops the cluster and removes the folder StartEnv made. Safe to call
// on a partly started Env.
func (e *Env) Close(ctx context.Context) error {
	var errs []error
	e.closing.Store(true)
	if e.spare != nil {
		e.dropSpares(ctx)
	}
	if e.cluster != nil {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		errs = append(errs, e.cluster.Stop(sctx))
		cancel()
	}
	if e.ownDir {
		errs = append(errs, os.RemoveAll(e.dir))
	}
	return errors.Join(errs...)
}
